"""The fetch order against a plain model, on a real Redis (Hypothesis): any interleaving of
enqueues (each with a priority and an enqueue time, times never going back) and fetches
of any size takes the jobs in the model's order — the least ``enqueued_at - priority *
aging`` first (with aging off: the highest priority first), a tie to the higher
priority, then first in, first out — whatever lists the jobs wait on."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st

from cogworker_async import job as job_module
from cogworker_async.priority import MAX_PRIORITY, MIN_PRIORITY
from cogworker_async.redis.store import Store

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


async def wipe(store: Store) -> None:
    keys = [key async for key in store.client.scan_iter(match=f"{store.keys.namespace}:*")]
    if keys:
        await store.client.delete(*keys)


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
