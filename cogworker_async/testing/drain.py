"""A worker with no Redis: the worker's own ``Processor``, settling into the fake.

Each faked run goes through exactly what a worker's processor slot does — decode, look
up, check the arguments, the deadline, the locks, the server middleware, the timeout,
``discard_on``, ``Retry``, a limiter's ``OverLimit``, ``keep_result``, and the decision
of ``worker/outcome.py`` — because it *is* that code. Only its three doors to Redis are
replaced: the settler (here: the outcome goes back into the ``World``), the store
(``memory.py``: locks, limiter decisions) and nothing else. The outcome a test sees is
the one the worker reports to its observers (``RunReport.outcome``).

Runs are one at a time, in order; the failure and death hooks are called after each
run, bounded as in a worker (``HookRunner.call``), and awaited: a test sees their effect
once ``drain()`` returns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from cogworker_async.errors import Expired, ResultNotJSON
from cogworker_async.jobs import wire
from cogworker_async.jobs.definition import JobDefinition
from cogworker_async.jobs.retries import attempt_of
from cogworker_async.jobs.status import JobStatus, error_text
from cogworker_async.limits.limiter import RUNNER
from cogworker_async.middleware import ServerMiddleware
from cogworker_async.settings import Settings
from cogworker_async.testing.memory import MemoryStore
from cogworker_async.testing.records import Run
from cogworker_async.testing.world import Entry, World, failure_text
from cogworker_async.worker.canceller import Canceller
from cogworker_async.worker.execute import Counters, Leftover
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.hooks import HookRunner, Hooks
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.observers import Observers, RunReport, death_of
from cogworker_async.worker.outcome import ACK, Ack, Disposition, Filing
from cogworker_async.worker.processor import Processor
from cogworker_async.worker.settlement import Settler, failure_of

IDENTITY: Final = "cogworker-testing"
"""The fake worker's process identity (a concurrent limiter's slot is held in it)."""


class FakeWorker:
    """One processor slot whose settler and observer are this object. Made per drain
    (or per inline run): its parts belong to the event loop that runs it."""

    def __init__(self, registry: Mapping[str, JobDefinition], settings: Settings,
                 middleware: Sequence[ServerMiddleware], hooks: Hooks, memory: MemoryStore,
                 world: World) -> None:
        self.world = world
        self.hooks = hooks
        self._hook_runner: HookRunner | None = None
        self._report: RunReport | None = None
        self._settled: Disposition | None = None
        self._entry: Entry | None = None
        store = memory  # a RunStore: what JobLocks, Canceller and the limiters use
        self.ledger = Ledger(1, 1)
        self.processor = Processor(
            registry, settings, self, Counters(), self.ledger, store=store,
            middleware=middleware, observers=Observers([self]),
            canceller=Canceller(store, IDENTITY, settings.queue_names))

    async def run(self, entry: Entry) -> Run | None:
        """Run one job taken from the world and settle it there; the run as the worker
        reported it (None: not run, e.g. its periodic predecessor still runs)."""
        work = Work(entry.queue, entry.raw)
        self._report, self._settled, self._entry = None, None, entry
        self.ledger.admit(work)
        await self.processor.process(work)
        report, settled = self._report, self._settled
        if report is None or settled is None:
            return None
        run = _run_of(report, settled, attempt_of(entry.payload()))
        self.world.runs.append(run)
        await self._call_hooks(report)
        return run

    async def run_now(self, entry: Entry) -> None:
        """``inline``: run the job at once through the server middleware, context and
        timeout (the executor's path), raising what it raised. Its locks are taken and
        released as a run's; it is not retried."""
        processor, payload = self.processor, entry.payload()
        definition = processor.registry[payload["class"]]  # enqueued through this App
        running = RUNNER.set(processor.runner)
        error: BaseException | None = None
        kept: bytes | None = None
        try:
            if await processor.locks.before_run(payload):  # False: a periodic overlap
                leftover = Leftover()
                await processor.executor.run(definition, payload, entry.queue, leftover)
                kept = self._kept(definition.name, payload, leftover)
        except BaseException as exc:
            error = exc
            raise
        finally:
            RUNNER.reset(running)
            # In-memory locks: nothing here waits, so it completes even when cancelled.
            ended = ACK if error is None else Filing("dead", payload, 0.0, terminal=True)
            await processor.locks.after_settle(payload, ended, ran=True)
            self._inline_end(entry, payload, error, kept)

    def _kept(self, name: str, payload: wire.Payload, leftover: Leftover) -> bytes | None:
        """The result the job keeps, as JSON (None: it keeps none); it must be one a
        worker can keep (``Processor._kept``): raised here, where a worker would file
        the job in dead."""
        if wire.number(payload, "keep_result") is None:
            return None
        try:
            return wire.encode_result(leftover.result, self.processor.settings.max_payload_bytes)
        except (TypeError, ValueError) as exc:
            raise ResultNotJSON(f"{name} returned a result that cannot be kept: "
                                f"{exc}") from None

    def _inline_end(self, entry: Entry, payload: wire.Payload, error: BaseException | None,
                    kept: bytes | None) -> None:
        """The run's end, in the world: its status keeps its result as an ack does (what
        ``jobs.result`` and a dependent's ``pass_result`` read)."""
        self.world.end(entry.queue, entry.jid, JobStatus(
            jid=entry.jid, state="succeeded" if error is None else "dead",
            queue=entry.queue, name=payload["class"], attempt=1, finished_at=time.time(),
            result=json.loads(kept) if kept is not None else None, has_result=kept is not None,
            error=None if error is None else error_text(type(error).__name__, str(error))))
        self.world.runs.append(Run(jid=entry.jid, name=payload["class"], queue=entry.queue,
                                   attempt=1, error=error,
                                   outcome="succeeded" if error is None else "dead"))

    # -- the processor's observer ------------------------------------------------------

    def finished(self, report: RunReport) -> None:
        self._report = report

    # -- the processor's settler -------------------------------------------------------

    async def settle(self, work: Work, disposition: Disposition) -> None:
        """File the outcome in the world, as the settle scripts file it in Redis."""
        self._settled = disposition
        entry = self._entry
        assert entry is not None, "settle() outside run()"
        queue, jid, now = entry.queue, entry.jid, time.time()
        if isinstance(disposition, Ack):
            ended = disposition.ended
            kept = ended.result is not None
            payload = entry.payload()
            self.world.end(queue, jid, JobStatus(
                jid=jid, state=ended.state, queue=queue, name=wire.name(payload),
                attempt=attempt_of(payload), finished_at=now,
                result=json.loads(ended.result) if ended.result is not None else None,
                has_result=kept,
                error=failure_text(payload)))  # an earlier attempt's, as the ack keeps it
        elif isinstance(disposition, Filing):
            # The entry exactly as a worker encodes it (its fallback for an entry that
            # is not JSON included).
            target, raw, delay = Settler._encoded(work, disposition)
            if target == "retry":
                self.world.running.discard((queue, jid))
                self.world.add(raw, queue, jid, due=now + delay, state="retrying")
            else:
                failure = failure_of(disposition, target)
                filed = wire.decode(raw, wire.NO_SIZE_LIMIT)
                self.world.end(queue, jid, JobStatus(
                    jid=jid, state="dead", queue=queue, name=wire.name(filed),
                    attempt=failure.attempt if failure else None, finished_at=now,
                    error=failure.error if failure else failure_text(filed)))
        else:  # GiveBack: it never started (the drain was cancelled)
            self.world.put_back(entry)

    async def _call_hooks(self, report: RunReport) -> None:
        """``on_failure`` and ``on_death`` as a worker calls them (``HookRunner``)."""
        if not self.hooks:
            return
        runner = self._hook_runner = self._hook_runner or HookRunner(self.hooks)
        if report.error is not None and report.context is not None:
            for failure_hook in self.hooks.on_failure:
                await runner.call(failure_hook, (report.context, report.error))
        death = death_of(report)
        if death is not None:
            for death_hook in self.hooks.on_death:
                await runner.call(death_hook, (death,))


def _run_of(report: RunReport, settled: Disposition, attempt: int) -> Run:
    entry = dict(settled.entry) if isinstance(settled, Filing) else None
    error = report.error
    if error is None and report.outcome == "expired" and entry is not None:
        error = Expired(str(entry.get("error_message", "")))  # it never ran: nothing raised
    result: Any = None
    if isinstance(settled, Ack) and settled.ended.result is not None:
        result = json.loads(settled.ended.result)
    return Run(jid=report.jid or "", name=report.name, queue=report.queue, attempt=attempt,
               outcome=report.outcome, error=error,
               delay=settled.delay if isinstance(settled, Filing) and
               settled.target == "retry" else None,
               result=result, entry=entry)

