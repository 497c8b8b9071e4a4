"""``jobs.testing``: enqueue and run an App's jobs in a test, with no Redis.

    with jobs.testing.fake():                  # or: async with
        await send_email.enqueue("a@example.com")
        assert [j.args for j in jobs.testing.enqueued(job=send_email)] == [["a@example.com"]]
        runs = await jobs.testing.drain()      # run them (and what they enqueue)
        assert [r.outcome for r in runs] == ["succeeded"]

    with jobs.testing.inline():                # each enqueue runs the job at once
        await send_email.enqueue("a@example.com")   # what it raises, raises here

A faked enqueue is a real one up to the push: the client's own checks, payload and
middleware run, and only the client's backend (``enqueue/backend.py``) is this fake's
for the block (``FakeBackend``): the push lands here instead of Redis, with
Redis' refusals: a unique job whose lock is held and a chosen jid that is alive return
None. A drained run is the worker's own processor (``drain.py``); batches and jobs that
run after others (``after=``, chains) are kept as the relay keeps them (``batches.py``,
``dependencies.py``): in ``inline()`` a job whose parents have all succeeded runs at
once, or when the last of them ends. Nothing here reaches Redis: inside a block
``jobs.status``, ``jobs.result`` and ``jobs.cancel`` answer from the fake
(``jobs.testing.status(jid)`` too); ``jobs.queues`` pauses the fake's queues (a drain
leaves their jobs queued until ``resume``), and a limiter entered outside a job (a web
handler's) decides in the fake's memory (``memory.py``), beside the drained jobs'. What
still needs Redis (the admin reads) raises ``NotFaked`` (``FakeBackend.store``), and so
does a drain whose order priority aging would change. tests/conformance runs the
behaviour scenarios over both backends: a difference is the fake's bug.
"""

from __future__ import annotations

import collections
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import anyio

from cogworker_async.enqueue.backend import Backend, DedupCall
from cogworker_async.enqueue.client import Client, Push
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.enqueue.lookup import outcome_of
from cogworker_async.jobs import wire
from cogworker_async.jobs.definition import JobDefinition, JobOptions
from cogworker_async.jobs.status import ALIVE, CancelOutcome, JobStatus, check_jid
from cogworker_async.middleware import ServerMiddleware
from cogworker_async.redis.limits import LimitStore
from cogworker_async.redis.pausing import Pause
from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings
from cogworker_async.testing.batches import FakeBatches
from cogworker_async.testing.dedup import FakeDedup
from cogworker_async.testing.dependencies import FakeDependencies
from cogworker_async.testing.drain import FakeWorker
from cogworker_async.testing.memory import MemoryStore
from cogworker_async.testing.records import Enqueued, NotFaked, Run, TooManyRuns
from cogworker_async.testing.world import Entry, World
from cogworker_async.worker.hooks import Hooks
from cogworker_async.worker.lifespan import Lifespan, entered
from cogworker_async.worker.observers import Outcome

MAX_RUNS: Final = 1000
"""Runs one ``drain()`` makes at most by default (a job that enqueues itself forever
stops there with ``TooManyRuns``)."""
MAX_INLINE_DEPTH: Final = 20
"""Inline runs nested at most (a job enqueuing a job ... each run inside the last)."""

JobRef = JobFunction[..., Any] | str
"""A job named by its function or its registered name."""


class Testing:
    """The testing helpers of one App (``jobs.testing``)."""

    def __init__(self, registry: Mapping[str, JobDefinition], settings: Settings,
                 client: Client, middleware: Sequence[ServerMiddleware], hooks: Hooks,
                 lifespan: Callable[[], Lifespan | None] = lambda: None) -> None:
        self._registry = registry
        self._lifespan = lifespan
        """The App's lifespan as it is when a drain or an inline run starts."""
        self._settings = settings
        self._client = client
        self._middleware = middleware
        self._hooks = hooks
        self._memory = MemoryStore(settings.namespace)
        self._world = World()
        self.batches = FakeBatches(registry, self._add_callback)
        self._world.on_end = self.batches.ended
        self.dependencies = FakeDependencies(self._world)
        self._world.on_finish = self.dependencies.ended
        self.dedup = FakeDedup(self._world, self.dependencies, self._push, self._wait)
        self._backend: Backend = FakeBackend(self)
        self._inline = False
        self._depth = 0

    # -- modes ---------------------------------------------------------------------------

    def fake(self) -> Mode:
        """Record enqueues in memory instead of pushing them to Redis, for the block
        (``with`` or ``async with``). The block starts with nothing recorded; what it
        recorded stays readable after it, until ``clear()`` or the next block."""
        return Mode(self, inline=False)

    def inline(self) -> Mode:
        """Run each enqueued job at once, in the caller, for the block: through the
        server middleware, with its context and timeout; what it raises reaches the
        caller (no retry). ``enqueue_in``/``enqueue_at`` run at once too."""
        return Mode(self, inline=True)

    @property
    def active(self) -> bool:
        """A ``fake()`` or ``inline()`` block is in effect."""
        return self._client.backend is self._backend

    def _begin(self, inline: bool) -> None:
        if self._client.backend is not self._client.redis:
            raise RuntimeError("this App's enqueues are already faked: leave the first "
                               "fake()/inline() block before entering another")
        self.clear()
        self._inline = inline
        self.batches.run_now = self._run_inline if inline else None
        self.dependencies.released = [] if inline else None
        self._client.backend = self._backend

    def _end(self) -> None:
        if self._client.backend is self._backend:
            self._client.backend = self._client.redis

    # -- reading -------------------------------------------------------------------------

    def enqueued(self, job: JobRef | None = None, queue: str | None = None) -> list[Enqueued]:
        """The jobs waiting (queued, scheduled, retrying), oldest first; ``job`` (a job
        function or a registered name) and ``queue`` filter them."""
        return self._world.enqueued(_name_of(job), queue)

    def runs(self, job: JobRef | None = None, outcome: Outcome | None = None) -> list[Run]:
        """The runs made since the block began, in order (``job``, ``outcome`` filter)."""
        name = _name_of(job)
        return [run for run in self._world.runs if (name is None or run.name == name)
                and (outcome is None or run.outcome == outcome)]

    def status(self, jid: str, *, queue: str | None = None) -> JobStatus:
        """What ``jobs.status(jid)`` would say of a faked job (state, error, result...)."""
        return self._world.status(jid, queue)

    def clear(self) -> None:
        """Forget every recorded job, run, status, unique lock, limiter holder and
        refusal, and pause (each block starts so)."""
        self._world.clear()
        self._memory.clear()
        self.batches.clear()
        self.dependencies.clear()
        self.dedup.clear()

    def refuse(self, *limiters: str) -> None:
        """Make these limiters refuse every acquisition in the block (``OverLimit``: a
        drained job is rescheduled, outcome ``limited``; a caller outside a job gets
        it); ``clear()`` admits again. Others decide as ``memory.py`` says."""
        self._memory.refusing.update(limiters)

    # -- running -------------------------------------------------------------------------

    async def drain(self, *, include_scheduled: bool = False, include_retries: bool = True,
                    max_runs: int = MAX_RUNS) -> list[Run]:
        """Run the recorded jobs due now, one at a time in order, and whatever they
        enqueue, through the worker's own processor; returns the runs made.

        - ``include_retries`` (default): a failed job's retries run at once (their
          delay is in ``Run.delay``); False leaves them waiting (``state == "retrying"``).
        - ``include_scheduled``: jobs due later (``enqueue_in``/``enqueue_at``) run too,
          by due time, as if the clock had moved on (deadlines are judged at the real
          time of the run).
        - After ``max_runs`` runs with jobs still due: ``TooManyRuns``.
        """
        if not self.active or self._inline:
            raise RuntimeError("drain() runs the jobs of a jobs.testing.fake() block")
        self._check_aging()
        worker = self._worker()
        made: list[Run] = []
        async with entered(self._lifespan()):  # as a worker process does, around its runs
            for _ in range(max_runs):
                entry = self._world.take(scheduled=include_scheduled, retries=include_retries)
                if entry is None:
                    return made
                run = await worker.run(entry)
                if run is not None:
                    made.append(run)
        if self._world.next_due(scheduled=include_scheduled, retries=include_retries) is None:
            return made
        raise TooManyRuns(f"drain() made {max_runs} runs and jobs are still due (a job that "
                          f"enqueues itself forever?): {self._backlog()}")

    def _check_aging(self) -> None:
        """The fake orders priorities with aging off; jobs that waited long enough for
        aging to change their order are refused, not run in another order than Redis'."""
        aged = self._world.aged(self._settings.priority_aging)
        if aged is not None:
            first, later = aged
            raise NotFaked(f"priority aging ({self._settings.priority_aging} s a level) "
                           f"would run {first.jid} (priority {first.priority}) before "
                           f"{later.jid} (priority {later.priority}), enqueued long after it: "
                           "the fake does not model aging; use App(priority_aging=None) "
                           "in the test, or drain sooner")

    def _worker(self) -> FakeWorker:
        return FakeWorker(self._registry, self._settings, self._middleware, self._hooks,
                          self._memory, self._world)

    def _backlog(self) -> str:
        names = collections.Counter(entry.name for entry in self._world.enqueued())
        return ", ".join(f"{name} x{count}" for name, count in names.most_common(3))

    def _cancel(self, jid: str, queue: str | None) -> CancelOutcome:
        """``jobs.cancel`` in the fake: a waiting job dropped, its unique lock released
        with it (as ``cancel.lua`` does)."""
        waiting = [entry for entry in self._world.waiting
                   if entry.jid == jid and queue in (None, entry.queue)]
        outcome = self._world.cancel(jid, queue)
        if outcome == "cancelled" and waiting:
            digest = wire.value(waiting[0].payload(), "unique_digest")
            if isinstance(digest, str):
                self._memory.drop_lock(self._memory.keys.unique(waiting[0].queue, digest), jid)
        return outcome

    def _add_callback(self, push: Push) -> bool:
        """A batch's callback, as the relay enqueues it: refused once its jid exists."""
        if self._world.known(push.jid):
            return False
        self._world.add(push.raw, push.queue, push.jid, due=None, state="queued")
        return True

    async def _run_inline(self, pushes: list[Push]) -> None:
        """Callbacks decided at a seal, in an ``inline()`` block: run at once."""
        for push in pushes:
            entry = next(e for e in self._world.waiting if e.jid == push.jid)
            await self._run_at_once(entry)

    async def _wait(self, push: Push, options: JobOptions, chosen: bool) -> bool:
        """A job that runs after others (``after=``): held until they end; in an
        ``inline()`` block, run at once if they all have (what it raises is raised)."""
        taken = await self.dependencies.wait(push, options, chosen=chosen)
        if taken and self._inline:
            failure = await self._run_released()
            if failure is not None:
                raise failure
        return taken

    async def _run_at_once(self, entry: Entry) -> None:
        """``inline``: run a waiting job now, nested in the caller, then the jobs its end
        released (``after=``: they run when their last parent ends). What the job raised
        is raised, once those ran; else the first thing one of them raised."""
        try:
            await self._nested(entry)
        except Exception:
            await self._run_released()  # on_parent_failure="run": they run after a failure
            raise
        failure = await self._run_released()
        if failure is not None:
            raise failure

    async def _resume(self, queue: str) -> bool:
        """``jobs.queues.resume`` in the fake; in ``inline()``, the jobs the pause held
        back run at once, in the order they came (as each enqueue would have run)."""
        if self._world.paused.pop(queue, None) is None:
            return False
        held_back = [entry for entry in self._world.waiting if entry.queue == queue]
        for entry in held_back if self._inline else ():
            if any(waiting is entry for waiting in self._world.waiting):
                await self._run_at_once(entry)
        return True

    async def _run_released(self) -> Exception | None:
        """``inline``: the jobs released since the last call, in the order they were,
        each run (and what their ends release, in turn); the first error one raised."""
        released, world = self.dependencies.released, self._world
        first: Exception | None = None
        for _ in range(MAX_RUNS):
            if not released:
                return first
            entry = released.pop(0)
            if not any(waiting is entry for waiting in world.waiting) or \
                    entry.queue in world.paused:
                continue  # cancelled since it was released; paused: queued till resume
            try:
                await self._nested(entry)
            except Exception as exc:
                first = first or exc
        raise TooManyRuns(f"inline runs released {MAX_RUNS} jobs in a row (a job that "
                          "enqueues a job after itself forever?)")

    async def _nested(self, entry: Entry) -> None:
        """``inline``: run one waiting job at once, one level deeper than the caller."""
        world = self._world
        world.waiting.remove(entry)
        world.running.add((entry.queue, entry.jid))
        if self._depth >= MAX_INLINE_DEPTH:
            world.running.discard((entry.queue, entry.jid))
            raise TooManyRuns(f"inline runs nested {MAX_INLINE_DEPTH} deep (a job that "
                              "enqueues itself forever?)")
        self._depth += 1
        try:
            if self._depth > 1:  # inside an outer inline run: its lifespan holds
                await self._worker().run_now(entry)
            else:
                async with entered(self._lifespan()):
                    await self._worker().run_now(entry)
        finally:
            self._depth -= 1

    async def _push(self, push: Push, due: float | None, chosen: bool) -> bool:
        world, memory = self._world, self._memory
        if chosen and world.alive(push.jid):
            return False  # enqueue.lua: a chosen jid is refused while alive anywhere
        if push.unique is not None:
            digest, ttl = push.unique
            if not memory.take_new_lock(memory.keys.unique(push.queue, digest), push.jid, ttl):
                return False
        entry = world.add(push.raw, push.queue, push.jid, due=due,
                          state="queued" if due is None else "scheduled")
        if self._inline and push.queue not in world.paused:  # paused: queued till resume
            await self._run_at_once(entry)
        return True


class Mode:
    """A ``fake()`` or ``inline()`` block: ``with`` or ``async with``."""

    def __init__(self, testing: Testing, *, inline: bool) -> None:
        self._testing = testing
        self._inline = inline

    def __enter__(self) -> Testing:
        self._testing._begin(self._inline)
        return self._testing

    def __exit__(self, *exc: object) -> None:
        self._testing._end()

    async def __aenter__(self) -> Testing:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()


class FakeBackend:
    """The client's backend (``enqueue/backend.py``'s ``Backend``) while a block is in
    effect: every operation answers from the fake's memory, none reaches a server."""

    def __init__(self, testing: Testing) -> None:
        self._testing = testing

    async def push(self, name: str, options: JobOptions, push: Push, epoch: float | None,
                   seconds: float | None, bid: str | None) -> str | None:
        due = epoch if seconds is None else time.time() + seconds
        taken = await self._testing._push(push, due, options.jid is not None)
        return push.jid if taken else None

    async def push_many(self, name: str, queue: str, pushes: Sequence[Push],
                        bid: str | None) -> set[str]:
        return {push.jid for push in pushes
                if not await self._testing._push(push, None, False)}  # in order

    async def wait(self, name: str, options: JobOptions, push: Push, batch: Any) -> bool:
        return await self._testing._wait(push, options, options.jid is not None)

    async def dedup(self, push: Push, options: JobOptions, call: DedupCall) -> str | None:
        return await self._testing.dedup.enqueue(push, options, call.mode, call.seconds,
                                                 call.key, call.due)

    def run_sync(self, enqueue: Callable[[], Awaitable[str | None]]) -> str | None:
        """``enqueue_sync``: the enqueue on a private event loop in a thread (the
        caller may be inside one, or in a job's thread); the caller waits for it."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(anyio.run, enqueue).result()

    async def status(self, jid: str, queue: str | None) -> JobStatus:
        return self._testing._world.status(check_jid(jid), queue)

    async def result(self, jid: str, timeout: float | None,  # noqa: ASYNC109
                     queue: str | None) -> Any:
        """At once, from what the fake holds: nothing would ever finish a job meanwhile
        (a job still waiting raises ``TimeoutError``: ``drain()`` it first)."""
        found = self._testing._world.status(check_jid(jid), queue)
        if found.state == "unknown":
            raise LookupError(f"no job {jid!r} in this fake() block")
        if found.state in ALIVE:
            raise TimeoutError(f"job {jid} is {found.state} in the fake: drain() it "
                               "before asking for its result")
        return outcome_of(found)

    async def cancel(self, jid: str, queue: str | None) -> CancelOutcome:
        return self._testing._cancel(check_jid(jid), queue)

    def batches(self) -> FakeBatches:
        return self._testing.batches

    def limit_store(self) -> LimitStore:
        """The drained jobs' own: a handler's slot and a job's count together."""
        return self._testing._memory

    async def pause(self, queue: str) -> bool:
        paused = self._testing._world.paused
        if queue in paused:
            return False  # its first pause is kept, as Redis' SET NX keeps it
        paused[queue] = Pause(queue, time.time(), socket.gethostname())
        return True

    async def resume(self, queue: str) -> bool:
        return await self._testing._resume(queue)

    async def pauses(self, queues: Sequence[str] | None,
                     own: Sequence[str]) -> dict[str, Pause]:
        world = self._testing._world
        names = [*sorted(world.queues()), *own] if queues is None else queues
        return {name: world.paused[name] for name in dict.fromkeys(names)
                if name in world.paused}

    def store(self) -> Store:
        raise NotFaked("this needs Redis, which a jobs.testing.fake()/inline() block does "
                       "not reach: the admin and dashboard reads are not faked "
                       "(docs/guides/testing.md); call it outside the block, on a real "
                       "server")


def _name_of(job: JobRef | None) -> str | None:
    if job is None or isinstance(job, str):
        return job
    return job.name
