"""The gates before a run (``worker/admission.py``), one at a time and in their order:
each one's verdict, and the first verdict winning. No Redis: the gates that decide are
pure, and the one that asks (``Overlapping``) asks the real ``JobLocks`` over the
testing helpers' in-memory store."""

from __future__ import annotations

import json
import logging
from typing import Any, Final, cast

from cogworker_async import App
from cogworker_async.errors import InvalidArguments, UnknownJob
from cogworker_async.jobs.context import RunControl
from cogworker_async.jobs.definition import JobDefinition
from cogworker_async.jobs.status import Ended
from cogworker_async.jobs.wire import Payload
from cogworker_async.redis.store import Store
from cogworker_async.testing.memory import MemoryStore
from cogworker_async.worker import admission
from cogworker_async.worker.admission import (
    SKIPPED,
    Admission,
    AsyncGate,
    BadArguments,
    Cancelled,
    Gate,
    Overlapping,
    PastDeadline,
    Ticket,
    Unregistered,
    Verdict,
    admit,
)
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.locks import JobLocks
from cogworker_async.worker.outcome import Ack, Filing, RetryDelays

NOW: Final = 1_000_000.0
POLICY: Final = RetryDelays(1.0, 60.0)
NAMESPACE: Final = "admission-tests"


def definition() -> JobDefinition:
    app = App("unix:///nonexistent/cogworker-admission.sock", namespace=NAMESPACE)

    @app.job(name="send")
    async def send(to: str) -> None:
        return None

    return app.registry["send"]


def payload(**fields: Any) -> Payload:
    found: dict[str, Any] = {"jid": "j1", "class": "send", "args": ["a@example.com"],
                             "kwargs": {}, "queue": "default", "retry": True,
                             "created_at": NOW - 10, "enqueued_at": NOW - 10, **fields}
    return cast(Payload, found)


def ticket(known: bool = True, **fields: Any) -> Ticket:
    return Ticket("default", payload(**fields), definition() if known else None,
                  clock=lambda: NOW)


def locks() -> tuple[JobLocks, MemoryStore]:
    memory = MemoryStore(NAMESPACE)
    return JobLocks(cast(Store, memory)), memory


def path() -> tuple[Admission, MemoryStore]:
    job_locks, memory = locks()
    return Admission.standard(POLICY, job_locks), memory


def test_the_standard_path_is_in_the_documented_order() -> None:
    gates, _ = path()
    assert [type(gate) for gate in gates.before_start] == [
        Unregistered, BadArguments, PastDeadline, Overlapping]
    assert [type(gate) for gate in gates.at_start] == [Cancelled]


def test_unreadable_bytes_are_dead_with_their_bytes_and_count_as_a_failure() -> None:
    verdict = admission.read(Work("default", b"{not json"), 1000, clock=lambda: NOW)
    assert isinstance(verdict, Verdict)
    assert isinstance(verdict.disposition, Filing)
    assert verdict.disposition.target == "dead"
    assert verdict.disposition.terminal
    assert verdict.disposition.entry["error_class"] == "UnparseablePayload"
    assert verdict.disposition.entry["failed_at"] == NOW
    assert (verdict.processed, verdict.failed, verdict.error) == (1, 1, None)
    assert not verdict.locks
    assert verdict.note is not None
    assert verdict.note.level == logging.ERROR


def test_readable_bytes_go_on_as_their_payload() -> None:
    raw = json.dumps(payload()).encode()
    assert admission.read(Work("default", raw), 1000) == payload()


def test_an_unregistered_name_is_dead_as_unknown_job() -> None:
    verdict = Unregistered().check(ticket(known=False))
    assert verdict is not None
    assert verdict.disposition is None  # dead with its error: filed by the processor
    assert isinstance(verdict.error, UnknownJob)
    assert "'send'" in str(verdict.error)
    assert (verdict.processed, verdict.failed, verdict.locks) == (1, 1, False)
    assert Unregistered().check(ticket()) is None


def test_arguments_that_fit_no_call_are_dead_as_invalid_arguments() -> None:
    verdict = BadArguments().check(ticket(args=[1, 2, 3]))
    assert verdict is not None
    assert verdict.disposition is None
    assert isinstance(verdict.error, InvalidArguments)
    assert (verdict.processed, verdict.failed, verdict.locks) == (1, 1, False)
    assert BadArguments().check(ticket()) is None
    assert BadArguments().check(ticket(known=False)) is None  # Unregistered's to say


def test_a_job_past_its_deadline_is_dead_as_expired() -> None:
    verdict = PastDeadline(POLICY).check(ticket(expires_at=NOW - 1))
    assert verdict is not None
    assert isinstance(verdict.disposition, Filing)
    assert verdict.disposition.target == "dead"
    assert verdict.disposition.entry["error_class"] == "Expired"
    assert verdict.expired
    assert verdict.locks
    assert verdict.unstarted
    assert (verdict.processed, verdict.failed, verdict.error) == (1, 0, None)
    assert verdict.note is not None
    assert verdict.note.level == logging.WARNING
    assert verdict.note.args[-1] == "dead"


def test_an_expired_job_enqueued_not_to_die_is_dropped() -> None:
    verdict = PastDeadline(POLICY).check(ticket(expires_at=NOW - 1, dead_on_expiry=False,
                                           keep_result=60))
    assert verdict is not None
    assert verdict.disposition == Ack(Ended("cancelled", keep=60))
    assert verdict.expired
    assert verdict.note is not None
    assert verdict.note.args[-1] == "dropped"


def test_a_job_within_its_deadline_or_with_none_goes_on() -> None:
    assert PastDeadline(POLICY).check(ticket(expires_at=NOW)) is None
    assert PastDeadline(POLICY).check(ticket()) is None


async def test_a_periodic_run_beside_its_predecessor_is_skipped_unreported() -> None:
    job_locks, memory = locks()
    key = memory.keys.periodic_running("default", "nightly")
    assert memory.take_new_lock(key, "j0", 60)  # the previous run still holds it
    assert await Overlapping(job_locks).check(ticket(periodic="nightly")) is SKIPPED
    assert SKIPPED.disposition == Ack()
    assert not SKIPPED.reported
    memory.drop_lock(key, "j0")
    assert await Overlapping(job_locks).check(ticket(periodic="nightly")) is None
    assert memory.holder(key) == "j1"  # it took the running lock: it may start


def test_a_cancel_asked_before_the_start_acks_it_cancelled() -> None:
    started = ticket(keep_result=30)
    assert Cancelled().check(started) is None  # not registered: no control
    started.control = RunControl("default", "j1")
    assert Cancelled().check(started) is None
    started.control.cancel_requested = True
    verdict = Cancelled().check(started)
    assert verdict is not None
    assert verdict.disposition == Ack(Ended("cancelled", keep=30))
    assert verdict.locks
    assert (verdict.processed, verdict.failed, verdict.error) == (0, 0, None)


async def test_the_first_verdict_wins_in_the_path_s_order() -> None:
    gates, _ = path()
    late_and_unknown = ticket(known=False, expires_at=NOW - 1, args=[1, 2, 3])
    verdict = await gates.before(late_and_unknown)
    assert verdict is not None
    assert isinstance(verdict.error, UnknownJob)
    late_and_bad = ticket(expires_at=NOW - 1, args=[1, 2, 3])
    verdict = await gates.before(late_and_bad)
    assert verdict is not None
    assert isinstance(verdict.error, InvalidArguments)  # dead whatever its deadline


async def test_an_expired_periodic_job_never_takes_its_running_lock() -> None:
    """The pure gates come first: a job refused by one asks Redis nothing."""
    gates, memory = path()
    verdict = await gates.before(ticket(expires_at=NOW - 1, periodic="nightly"))
    assert verdict is not None
    assert verdict.expired
    assert memory.holder(memory.keys.periodic_running("default", "nightly")) is None


async def test_a_job_every_gate_lets_through_gets_no_verdict() -> None:
    gates, _ = path()
    assert await gates.before(ticket(expires_at=NOW + 60)) is None
    assert await gates.starting(ticket()) is None


class Says:
    """A gate that gives ``verdict`` (or lets it go on), and notes that it was asked."""

    def __init__(self, asked: list[str], name: str, verdict: Verdict | None) -> None:
        self.asked, self.name, self.verdict = asked, name, verdict

    def check(self, ticket: Ticket) -> Verdict | None:
        self.asked.append(self.name)
        return self.verdict


class AsksOutside:
    """The same, awaitable (a gate that must ask Redis)."""

    def __init__(self, asked: list[str], name: str, verdict: Verdict | None) -> None:
        self.asked, self.name, self.verdict = asked, name, verdict

    async def check(self, ticket: Ticket) -> Verdict | None:
        self.asked.append(self.name)
        return self.verdict


async def test_admit_awaits_the_gates_that_ask_and_stops_at_the_first_verdict() -> None:
    asked: list[str] = []
    stop = Verdict(Ack())
    gates: list[Gate | AsyncGate] = [Says(asked, "a", None), AsksOutside(asked, "b", None),
                                     AsksOutside(asked, "c", stop), Says(asked, "d", SKIPPED)]
    assert await admit(gates, ticket()) is stop
    assert asked == ["a", "b", "c"]
