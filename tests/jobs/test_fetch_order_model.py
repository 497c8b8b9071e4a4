"""The fetch order against a plain model, on a real Redis (Hypothesis): any interleaving of
enqueues (each with a priority and an enqueue time, times never going back) and fetches
of any size takes the jobs in the model's order — the least ``enqueued_at - priority *
aging`` first (with aging off: the highest priority first), a tie to the higher
priority, then first in, first out — whatever lists the jobs wait on.

Each example starts by wiping its namespace (``tests.workbench.wipe``: a SCAN of 1,000
keys a step): in ``make test`` the session server holds every earlier test's keys, and
SCAN's default step of 10 made each wipe thousands of round trips (47 s for this file)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st

from cogworker_async.jobs import wire as job_module
from cogworker_async.jobs.priority import MAX_PRIORITY, MIN_PRIORITY
from cogworker_async.redis.store import Store
from tests.workbench import wipe

ME = "model:1:me"
QUEUE = "model"
START = 1_700_000_000.0


@dataclass(frozen=True)
class Waiting:
    raw: bytes
    priority: int
    enqueued_at: float
    seq: int

    def key(self, aging: float | None) -> tuple[float, int, int]:
        score = -self.priority if aging is None else self.enqueued_at - self.priority * aging
        return (score, -self.priority, self.seq)


enqueue = st.tuples(st.just("enqueue"), st.integers(MIN_PRIORITY, MAX_PRIORITY),
                    st.sampled_from([0.0, 0.0, 0.5, 1.0, 7.0]), st.integers(1, 3))
fetch = st.tuples(st.just("fetch"), st.integers(1, 5))
steps = st.lists(st.one_of(enqueue, fetch), min_size=1, max_size=40)
agings = st.sampled_from([None, 1.0, 3.0])


@given(steps=steps, aging=agings)
@example(steps=[("enqueue", -10, 0.0, 1), ("enqueue", 10, 25.0, 1), ("fetch", 2)], aging=1.0)
async def test_the_fetch_takes_jobs_in_the_models_order(
    store: Store, steps: list[tuple], aging: float | None,
) -> None:
    await wipe(store)
    model: list[Waiting] = []
    now, seq = START, 0
    for step in [*steps, ("fetch", 10_000)]:
        if step[0] == "enqueue":
            _, priority, later, count = step
            now += later
            raws = []
            for _ in range(count):
                payload = job_module.build("model.job", [seq], {}, queue=QUEUE, retry=True,
                                           now=now, priority=priority)
                raws.append(job_module.encode_new(payload, job_module.NO_SIZE_LIMIT))
                model.append(Waiting(raws[-1], priority, now, seq))
                seq += 1
            await store.enqueue(QUEUE, raws)
        else:
            fetched = await store.fetch(ME, [QUEUE], step[1], aging=aging)
            expected = sorted(model, key=lambda w: w.key(aging))[:step[1]]
            assert [raw for _, raw in fetched.jobs] == [w.raw for w in expected]
            for taken in expected:
                model.remove(taken)
    assert model == []


@dataclass
class RingModel:
    """The fetch with fair groups, as the docs state it: groups served in turn (a group
    joins the ring at its back when it gets jobs, goes to the back when it got one, and
    leaves when it has none); the jobs without a group take one turn together (joining
    the ring, while it exists, at the start of a fetch that finds them waiting), among
    themselves by priority, then first in, first out."""

    groups: dict[str, list[bytes]]
    plain: list[Waiting]
    ring: list[str]

    def push(self, raw: bytes, group: str | None, waiting: Waiting) -> None:
        if group is None:
            self.plain.append(waiting)
            return
        self.groups.setdefault(group, []).append(raw)
        if group not in self.ring:
            self.ring.append(group)

    def take_plain(self) -> bytes:
        first = min(self.plain, key=lambda w: w.key(None))
        self.plain.remove(first)
        return first.raw

    def fetch(self, count: int) -> list[bytes]:
        if not self.ring:
            return [self.take_plain() for _ in range(min(count, len(self.plain)))]
        if self.plain and "" not in self.ring:
            self.ring.append("")
        taken: list[bytes] = []
        while len(taken) < count and self.ring:
            member = self.ring.pop(0)
            if member == "":
                taken.append(self.take_plain())
                more = bool(self.plain)
            else:
                taken.append(self.groups[member].pop(0))
                more = bool(self.groups[member])
            if more:
                self.ring.append(member)
        return taken


grouped_enqueue = st.tuples(st.just("enqueue"), st.sampled_from([None, None, "a", "b", "c"]),
                            st.integers(-2, 2), st.integers(1, 3))
grouped_steps = st.lists(st.one_of(grouped_enqueue, fetch), min_size=1, max_size=40)


@given(steps=grouped_steps)
@example(steps=[("enqueue", "a", 0, 3), ("enqueue", None, 2, 2), ("enqueue", "b", 0, 1),
                ("fetch", 5)])
async def test_the_fetch_serves_groups_in_turn_as_the_model_does(
    store: Store, steps: list[tuple],
) -> None:
    await wipe(store)
    model = RingModel({}, [], [])
    seq = 0
    for step in [*steps, ("fetch", 10_000)]:
        if step[0] == "enqueue":
            _, group, priority, count = step
            raws = []
            for _ in range(count):
                payload = job_module.build("model.job", [seq], {}, queue=QUEUE, retry=True,
                                           now=START + seq, priority=priority, group=group)
                raws.append(job_module.encode_new(payload, job_module.NO_SIZE_LIMIT))
                model.push(raws[-1], group, Waiting(raws[-1], priority, START + seq, seq))
                seq += 1
            await store.enqueue(QUEUE, raws)
        else:
            fetched = await store.fetch(ME, [QUEUE], step[1], aging=None)
            assert [raw for _, raw in fetched.jobs] == model.fetch(step[1])
    assert not model.plain
    assert not any(model.groups.values())
