"""The fake must not drift from the real thing: each scenario runs once through
``jobs.testing.fake()`` + ``drain()`` (no Redis) and once through a real worker on a real
Redis, and what a user can observe must be the same — what each enqueue returned or
raised, the runs the jobs saw (tag, attempt), and each job's final state and error.

The scenarios are the end-to-end ones that make sense without Redis (tests/worker/e2e): a
success, a failure retried then a success, out of retries to dead, ``discard_on``,
``Retry(in_=...)``, a timeout, a unique job's duplicate, a chosen jid's duplicate,
refusals at the enqueue (arguments, JSON, size, queue), a job enqueueing another (a
plain function), an expired job (dead and dropped), middleware adding a payload field
the job sees, a kept result, and a job inside a limiter."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import pytest

from cogworker_async import App, Retry, current_job
from cogworker_async.jobs.context import JobContext
from cogworker_async.jobs.status import JobStatus
from cogworker_async.middleware import Enqueue, EnqueueNext, RunNext
from tests.waiting import wait_until

TIMEOUT: Final = 20.0
"""Seconds a real worker gets to finish a scenario's jobs."""

Result = str | None | BaseException
Act = Callable[[], Awaitable[list[Result]]]


@dataclass
class Scenario:
    act: Act
    """Enqueue (before any job runs): what each enqueue returned or raised."""
    after: Act | None = None
    """Enqueue again once everything ran (a unique lock or a chosen jid freed)."""
    pause: float = 0.0
    """Seconds to let pass between ``act`` and running the jobs (deadlines)."""
    ran: list[str] = field(default_factory=list)
    """Filled by the jobs: what each run saw."""


Build = Callable[[App], Scenario]


async def attempt(call: Callable[[], Awaitable[str | None]]) -> Result:
    try:
        return await call()
    except Exception as exc:
        return exc


def _seen(ran: list[str], tag: str) -> None:
    ran.append(f"{tag}:{current_job().attempt}")


# -- the scenarios ----------------------------------------------------------------------


def success(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: work.enqueue("a")))

    @app.job(name="work")
    async def work(tag: str) -> None:
        _seen(s.ran, tag)

    return s


def retried_then_succeeded(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: flaky.enqueue("f")))

    @app.job(name="flaky", retry=3)
    async def flaky(tag: str) -> None:
        _seen(s.ran, tag)
        if current_job().attempt == 1:
            raise RuntimeError("first try fails")

    return s


def out_of_retries(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: fail.options(retry=2).enqueue("d")))

    @app.job(name="fail")
    async def fail(tag: str) -> None:
        _seen(s.ran, tag)
        raise RuntimeError(f"boom {tag}")

    return s


def discarded(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: refused.enqueue("p")))

    @app.job(name="refused", retry=5, discard_on=(PermissionError,))
    async def refused(tag: str) -> None:
        _seen(s.ran, tag)
        raise PermissionError("not allowed")

    return s


def retry_asked(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: later.enqueue("r")))

    @app.job(name="later", retry=1)
    async def later(tag: str) -> None:
        _seen(s.ran, tag)
        if current_job().attempt == 1:
            raise Retry(in_=0.3)

    return s


def timed_out(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: slow.enqueue("t")))

    @app.job(name="slow", retry=False, timeout=0.1)
    async def slow(tag: str) -> None:
        _seen(s.ran, tag)
        await anyio.sleep(3600)  # cancelled by its timeout

    return s


def unique_duplicate(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: report.enqueue("day"), lambda: report.enqueue("day"),
                                   lambda: report.enqueue("other")),
                 after=lambda: _each(lambda: report.enqueue("day")))

    @app.job(name="report", unique=True)
    async def report(day: str) -> None:
        _seen(s.ran, day)

    return s


def chosen_jid_duplicate(app: App) -> Scenario:
    def receipt() -> Awaitable[str | None]:
        return send.options(jid="receipt-42").enqueue("o")

    s = Scenario(act=lambda: _each(receipt, receipt), after=lambda: _each(receipt))

    @app.job(name="send")
    async def send(tag: str) -> None:
        _seen(s.ran, tag)

    return s


def refused_at_enqueue(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(
        lambda: work.enqueue(),  # type: ignore[call-arg]
        lambda: work.enqueue("a", extra=1),  # type: ignore[call-arg]
        lambda: work.enqueue({1, 2}),  # type: ignore[arg-type]
        lambda: work.enqueue(("a", "b")),  # type: ignore[arg-type]
        lambda: work.enqueue("x" * 5000),
        lambda: work.options(queue="no spaces").enqueue("a"),
        lambda: work.options(expires_at=time.time() - 1).enqueue("a"),
        lambda: work.enqueue("fits")))

    @app.job(name="work")
    async def work(tag: str) -> None:
        _seen(s.ran, tag)

    return s


def enqueues_another(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: parent.enqueue("p")))

    @app.job(name="parent")
    async def parent(tag: str) -> None:
        _seen(s.ran, tag)
        await child.enqueue(f"{tag}-child")

    @app.job(name="child")
    def child(tag: str) -> None:  # a plain function: a worker thread, current_job() too
        _seen(s.ran, tag)

    return s


def expired(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(
        lambda: work.options(expires_in=0.2).enqueue("late"),
        lambda: work.options(expires_in=0.2, dead_on_expiry=False).enqueue("dropped"),
        lambda: work.options(expires_in=3600).enqueue("timely")), pause=0.3)

    @app.job(name="work")
    async def work(tag: str) -> None:
        _seen(s.ran, tag)

    return s


def middleware_field(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: tenant_job.enqueue("m")))

    async def tag_tenant(enqueue: Enqueue, call_next: EnqueueNext) -> str | None:
        enqueue.payload["tenant"] = "acme"
        return await call_next(enqueue)

    async def around(job: JobContext, call_next: RunNext) -> None:
        s.ran.append(f"middleware saw {job.payload.get('tenant')}")
        await call_next(job)

    app.add_client_middleware(tag_tenant)
    app.add_server_middleware(around)

    @app.job(name="tenant_job")
    async def tenant_job(tag: str) -> None:
        _seen(s.ran, f"{tag}:{current_job().payload['tenant']}")

    return s


def kept_result(app: App) -> Scenario:
    s = Scenario(act=lambda: _each(lambda: compute.enqueue(21)))

    @app.job(name="compute", keep_result=60)
    async def compute(n: int) -> dict[str, int]:
        _seen(s.ran, str(n))
        return {"double": n * 2}

    return s


def limited(app: App) -> Scenario:
    payments = app.limiter("payments", concurrent=2)
    s = Scenario(act=lambda: _each(lambda: charge.enqueue("c")))

    @app.job(name="charge")
    async def charge(tag: str) -> None:
        async with payments:
            _seen(s.ran, tag)

    return s


SCENARIOS: Final[dict[str, Build]] = {build.__name__: build for build in (
    success, retried_then_succeeded, out_of_retries, discarded, retry_asked, timed_out,
    unique_duplicate, chosen_jid_duplicate, refused_at_enqueue, enqueues_another, expired,
    middleware_field, kept_result, limited)}


async def _each(*calls: Callable[[], Awaitable[str | None]]) -> list[Result]:
    return [await attempt(call) for call in calls]


# -- running them both ways -------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """What a user can observe of a scenario."""

    enqueued: list[str | None]
    after: list[str | None]
    ran: list[str]
    ends: list[tuple[str, str | None, Any]]
    """Per job enqueued by ``act``: final state, error class, kept result."""
    heard: list[str]
    """What the failure and death hooks were called with."""


def _shape(result: Result) -> str | None:
    """An enqueue's answer as comparable: None, a chosen jid, "jid", or the error type."""
    if isinstance(result, BaseException):
        return type(result).__name__
    if result is None or result.startswith("receipt-"):
        return result
    return "jid"


async def _let_pass(seconds: float) -> None:
    deadline = time.time() + seconds

    async def passed() -> bool:
        return time.time() > deadline

    await wait_until(passed, timeout=seconds + 5, every=0.02)


async def through_fake(build: Build, make_app: Callable[..., App]) -> Observed:
    app = make_app(max_payload_bytes=4096)
    scenario, heard = build(app), _listen(app)
    with app.testing.fake() as testing:
        enqueued = await scenario.act()
        await _let_pass(scenario.pause)
        await testing.drain()
        assert testing.enqueued() == [], "drain() left jobs due"
        statuses = [testing.status(jid) for jid in enqueued if isinstance(jid, str)]
        after = await scenario.after() if scenario.after else []
    return _observed(scenario, enqueued, after, statuses, heard)


async def through_worker(build: Build, make_app: Callable[..., App],
                         hooks_heard: int) -> Observed:
    """``hooks_heard``: the hook calls to wait for (a worker calls hooks apart from the
    run, and drops those still buffered when it stops)."""
    app = make_app(max_payload_bytes=4096)
    scenario, heard = build(app), _listen(app)
    enqueued = await scenario.act()
    await _let_pass(scenario.pause)
    async with app.worker() as worker:
        await wait_until(lambda: _quiet(app, worker.identity), timeout=TIMEOUT)
        await wait_until(lambda: len(heard) >= hooks_heard, timeout=TIMEOUT)
    statuses = [await app.status(jid) for jid in enqueued if isinstance(jid, str)]
    after = await scenario.after() if scenario.after else []
    return _observed(scenario, enqueued, after, statuses, heard)


def _listen(app: App) -> list[str]:
    """What the App's failure and death hooks hear."""
    heard: list[str] = []
    app.on_failure(lambda job, error: heard.append(f"failure {job.name} {type(error).__name__}"))
    app.on_death(lambda death: heard.append(f"death {death.name} {death.reason}"))
    return heard


def _observed(scenario: Scenario, enqueued: list[Result], after: list[Result],
              statuses: list[JobStatus], heard: list[str]) -> Observed:
    return Observed([_shape(r) for r in enqueued], [_shape(r) for r in after],
                    sorted(scenario.ran),
                    [(s.state, (s.error or "").split(":")[0] or None, s.result)
                     for s in statuses], sorted(heard))


async def _quiet(app: App, identity: str) -> bool:
    """Nothing of the namespace waits or runs any more: queue, schedule, retries and the
    worker's in-progress list are empty, read in one transaction (a job moves between
    them in one script; read one by one, a move between two reads would hide it)."""
    store = app._store()
    keys = store.keys
    async with store.client.pipeline(transaction=True) as pipe:
        for queue in app.settings.queue_names:
            pipe.llen(keys.queue(queue))
            pipe.zcard(keys.schedule(queue))
            pipe.zcard(keys.retry(queue))
            pipe.llen(keys.in_progress(queue, identity))
        sizes = await pipe.execute()
    return not any(sizes)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_the_fake_and_a_real_worker_agree(name: str,
                                                make_app: Callable[..., App]) -> None:
    build = SCENARIOS[name]
    faked = await through_fake(build, make_app)
    real = await through_worker(build, make_app, hooks_heard=len(faked.heard))
    assert faked == real
    assert real.ran or real.enqueued, "the scenario observed nothing"
