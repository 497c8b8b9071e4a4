"""Option families as values, end to end on a real Redis: ``dedup=Unique(...) |
Throttle(s) | Debounce(s) | Coalesce()``, ``after=After(...)``, ``retry=RetryPolicy(...)``
and ``group=Group(...)`` work on ``@jobs.job(...)`` and on ``.options(...)`` as their flat
spellings do (which still work), and a bad value is refused at the call, naming the
problem."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import (
    After,
    App,
    Coalesce,
    Debounce,
    Group,
    RetryPolicy,
    Throttle,
    Unique,
)
from tests.waiting import wait_until

WAIT = 15.0
SURFACES = ("decorator", "options", "flat")
"""Where the option is given: the value on ``@jobs.job``, the value on ``.options``, or
the older flat keywords (the decorator's, else the options')."""


async def _state(app: App, jid: str | None) -> str:
    assert jid is not None
    return (await app.status(jid)).state


def noting(app: App, ran: list[Any], surface: str, value: object, flat: dict[str, Any],
           *, flat_on_decorator: bool = False, **job: Any) -> Any:
    """A job ``note(key, n)`` that notes ``(key, n)``, with ``value`` (or ``flat``) given
    on ``surface``: its enqueuer."""
    declared: dict[str, Any] = dict(job)
    if surface == "decorator":
        declared.update(value if isinstance(value, dict) else {"dedup": value})
    if surface == "flat" and flat_on_decorator:
        declared.update(flat)

    @app.job(name="note", **declared)
    async def note(key: str, n: int) -> None:
        ran.append((key, n))

    if surface == "options":
        return note.options(**(value if isinstance(value, dict) else {"dedup": value}))
    if surface == "flat" and not flat_on_decorator:
        return note.options(**flat)
    return note


# -- dedup ----------------------------------------------------------------------------


@pytest.mark.parametrize("surface", SURFACES)
async def test_throttle_refuses_a_keys_second_enqueue_on_every_surface(
    make_app: Callable[..., App], surface: str,
) -> None:
    app = make_app(track_jobs=True)
    ran: list[Any] = []
    # the key as a function of the arguments: only ``key`` counts, not ``n``
    note = noting(app, ran, surface, Throttle(60, key=lambda key, n: key),
                  {"throttle": 60, "key": "user:1"})

    assert await note.enqueue("user:1", 1) is not None
    assert await note.enqueue("user:1", 2) is None
    if surface != "flat":  # a fixed key in the flat spelling: every enqueue is user:1's
        assert await note.enqueue("user:2", 1) is not None
    async with app.worker():
        await wait_until(lambda: len(ran) == (1 if surface == "flat" else 2), timeout=WAIT)
    assert ("user:1", 1) in ran
    assert ("user:1", 2) not in ran


@pytest.mark.parametrize("surface", SURFACES)
async def test_debounce_runs_a_burst_once_with_its_last_arguments_on_every_surface(
    make_app: Callable[..., App], surface: str,
) -> None:
    app = make_app(track_jobs=True)
    ran: list[Any] = []
    note = noting(app, ran, surface, Debounce(0.3, key="burst"),
                  {"debounce": 0.3, "key": "burst"})

    jids = {await note.enqueue("burst", n) for n in range(3)}
    assert len(jids) == 1
    async with app.worker():
        await wait_until(lambda: bool(ran), timeout=WAIT)
        assert await _state(app, jids.pop()) in ("running", "succeeded")
    assert ran == [("burst", 2)]


@pytest.mark.parametrize("surface", SURFACES)
async def test_coalesce_merges_enqueues_into_the_waiting_job_on_every_surface(
    make_app: Callable[..., App], surface: str,
) -> None:
    app = make_app(track_jobs=True)
    ran: list[Any] = []
    note = noting(app, ran, surface, Coalesce(key="k"), {"coalesce": True, "key": "k"})

    jids = {await note.enqueue("k", n) for n in range(3)}
    assert len(jids) == 1
    async with app.worker():
        await wait_until(lambda: _is(app, next(iter(jids)), "succeeded"), timeout=WAIT)
    assert ran == [("k", 2)]


@pytest.mark.parametrize("surface", SURFACES)
async def test_unique_holds_one_job_of_a_digest_on_every_surface(
    make_app: Callable[..., App], surface: str,
) -> None:
    """``Unique`` on ``.options()`` is new: the decorator had the only spelling."""
    app = make_app(track_jobs=True)
    ran: list[Any] = []
    note = noting(app, ran, surface, Unique(ttl=60, key=lambda key, n: key),
                  {"unique": True, "unique_ttl": 60, "unique_key": lambda key, n: key},
                  flat_on_decorator=True)

    first = await note.enqueue("a", 1)
    assert first is not None
    assert await note.enqueue("a", 2) is None  # the digest is the key: n does not count
    assert await note.enqueue("b", 1) is not None
    async with app.worker():
        await wait_until(lambda: len(ran) == 2, timeout=WAIT)
        await wait_until(lambda: _is(app, first, "succeeded"), timeout=WAIT)
        assert await note.enqueue("a", 3) is not None  # released once it succeeded
        await wait_until(lambda: len(ran) == 3, timeout=WAIT)
    assert sorted(ran) == [("a", 1), ("a", 3), ("b", 1)]


async def test_a_dedup_value_on_a_call_replaces_the_jobs_own(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True)
    ran: list[Any] = []

    @app.job(name="note", dedup=Unique())
    async def note(key: str, n: int) -> None:
        ran.append((key, n))

    throttled = note.options(dedup=Throttle(60, key="t"))
    assert throttled.job_options.unique is None
    assert await throttled.enqueue("x", 1) is not None
    assert await throttled.enqueue("y", 2) is None  # one key: the throttle's
    with pytest.raises(ValueError, match="does not combine with unique"):
        note.options(throttle=60)  # a flat spelling changes only itself, as before
    async with app.worker():
        await wait_until(lambda: ran == [("x", 1)], timeout=WAIT)


# -- after ----------------------------------------------------------------------------


@pytest.mark.parametrize("surface", ["options", "flat"])
async def test_after_makes_a_waiting_dependent_that_takes_its_parents_result(
    make_app: Callable[..., App], surface: str,
) -> None:
    app = make_app(track_jobs=True)
    ran: list[Any] = []
    gate = anyio.Event()

    @app.job(name="parent", retry=0, keep_result=600)
    async def parent(n: int) -> int:
        await gate.wait()
        return n + 1

    @app.job(name="child", retry=0)
    async def child(value: int) -> None:
        ran.append(value)

    async with app.worker():
        first = await parent.enqueue(41)
        assert first is not None
        waiting = child.options(after=After([first], pass_result=True)) \
            if surface == "options" else child.options(after=[first], pass_result=True)
        jid = await waiting.enqueue()
        assert await _state(app, jid) == "waiting"
        gate.set()
        await wait_until(lambda: ran == [42], timeout=WAIT)


@pytest.mark.parametrize("surface", ["decorator", "options"])
async def test_after_on_failure_run_runs_the_dependent_of_a_dead_parent(
    make_app: Callable[..., App], surface: str,
) -> None:
    """On the decorator, ``After(on_failure=...)`` with no jids is the job's policy for
    the parents a call names."""
    app = make_app(track_jobs=True)
    ran: list[Any] = []

    @app.job(name="parent", retry=0)
    async def parent() -> None:
        raise ValueError("no")

    @app.job(name="child", retry=0,
             **({"after": After(on_failure="run")} if surface == "decorator" else {}))
    async def child(tag: str) -> None:
        ran.append(tag)

    async with app.worker():
        first = await parent.enqueue()
        assert first is not None
        dependent = child.options(after=[first]) if surface == "decorator" \
            else child.options(after=After([first], on_failure="run"))
        jid = await dependent.enqueue("ran")
        await wait_until(lambda: _is(app, jid, "succeeded"), timeout=WAIT)
    assert ran == ["ran"]


# -- retry ----------------------------------------------------------------------------


@pytest.mark.parametrize("surface", SURFACES)
async def test_retry_policy_max_1_files_a_job_dead_after_two_runs(
    make_app: Callable[..., App], surface: str,
) -> None:
    app = make_app(track_jobs=True)
    runs: list[int] = []
    declared = {"retry": RetryPolicy(max=1)} if surface == "decorator" else {}

    @app.job(name="fails", **declared)
    async def fails() -> None:
        runs.append(1)
        raise ValueError("always")

    enqueuer = {"decorator": fails, "options": fails.options(retry=RetryPolicy(max=1)),
                "flat": fails.options(retry=1)}[surface]
    async with app.worker():
        jid = await enqueuer.enqueue()
        await wait_until(lambda: _is(app, jid, "dead"), timeout=WAIT)
    assert len(runs) == 2


async def test_retry_policy_delay_and_discard_on_are_the_workers_rules(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True)
    runs: list[tuple[str, float]] = []

    @app.job(name="flaky", retry=RetryPolicy(max=1, delay=0.3, discard_on=(KeyError,)))
    async def flaky(kind: str) -> None:
        runs.append((kind, time.monotonic()))
        raise KeyError(kind) if kind == "discard" else ValueError(kind)

    async with app.worker():
        discarded = await flaky.enqueue("discard")
        retried = await flaky.enqueue("retry")
        await wait_until(lambda: _is(app, discarded, "dead"), timeout=WAIT)
        await wait_until(lambda: _is(app, retried, "dead"), timeout=WAIT)
    assert [kind for kind, _ in runs].count("discard") == 1
    [first, second] = [at for kind, at in runs if kind == "retry"]
    assert second - first >= 0.3 - 0.05


async def test_periodic_takes_a_retry_policy(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.periodic("*/5 * * * *", name="tick", retry=RetryPolicy(max=2))
    async def tick() -> None: ...

    assert app.registry["tick"].options.retry == 2


# -- group ----------------------------------------------------------------------------


@pytest.mark.parametrize("surface", SURFACES)
async def test_group_limit_1_holds_a_second_job_of_the_group(
    make_app: Callable[..., App], surface: str,
) -> None:
    """a1 and a2 of group a, then b1 of group b, on 2 slots: b1 runs while a1 holds the
    group's only slot, and a2 starts only once a1 has ended."""
    app = make_app(concurrency=2, **({"group_limits": {"default": 1}}
                                     if surface != "decorator" else {}))
    started: list[str] = []
    gate = anyio.Event()
    by_tenant = Group(lambda tenant, n: tenant, limit=1)

    @app.job(name="tenant_job", retry=0,
             **({"group": by_tenant} if surface == "decorator" else {}))
    async def tenant_job(tenant: str, n: int) -> None:
        started.append(f"{tenant}{n}")
        if f"{tenant}{n}" == "a1":
            await gate.wait()

    enqueuer = {"decorator": tenant_job, "options": tenant_job.options(group=by_tenant),
                "flat": tenant_job.options(group=lambda tenant, n: tenant)}[surface]
    assert app.settings.group_limits == {"default": 1}
    for tenant, n in (("a", 1), ("a", 2), ("b", 1)):
        await enqueuer.enqueue(tenant, n)
    async with app.worker():
        await wait_until(lambda: "b1" in started, timeout=WAIT)
        assert "a2" not in started  # held: a1 runs, b1 ran on the other slot
        gate.set()
        await wait_until(lambda: "a2" in started, timeout=WAIT)
    assert started.index("a1") < started.index("a2")


async def test_a_fixed_group_on_a_call_wins_over_the_jobs_function(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.job(name="tenant_job", group=Group(lambda tenant: tenant))
    async def tenant_job(tenant: str) -> None: ...

    fixed = tenant_job.options(group=Group("everyone"))
    assert (fixed.job_options.group, fixed.job_options.group_key) == ("everyone", None)
    assert tenant_job.options(group="x").job_options.group == "x"


async def test_a_value_and_its_flat_spelling_build_the_same_payload(
    make_app: Callable[..., App],
) -> None:
    """The wire format does not change: the payload is the same whichever spelling."""
    app = make_app()

    @app.job(name="report", queue="reports")
    async def report(tenant: str, month: str) -> None: ...

    async def fields(enqueuer: Any) -> dict[str, Any]:
        push = await enqueuer.prepared("t-1", "2030-01")
        payload = json.loads(push.raw)
        return {k: v for k, v in payload.items()
                if k not in ("jid", "created_at", "enqueued_at")}

    by_value = await fields(report.options(retry=RetryPolicy(max=3), priority=2,
                                           group=Group(lambda tenant, month: tenant)))
    by_flat = await fields(report.options(retry=3, priority=2,
                                          group=lambda tenant, month: tenant))
    assert by_value == by_flat
    assert (by_value["retry"], by_value["group"], by_value["priority"]) == (3, "t-1", 2)


# -- refused at the call --------------------------------------------------------------


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: Throttle(0), ValueError, "Throttle must be seconds > 0"),
    (lambda: Throttle("5"), TypeError, "Throttle must be seconds or a timedelta"),
    (lambda: Debounce(None), TypeError, "Debounce needs a number"),
    (lambda: Coalesce(key=""), TypeError, "key must be a non-empty str"),
    (lambda: Unique("sometimes"), ValueError, "Unique's policy must be one of"),
    (lambda: Unique(ttl=-1), ValueError, "ttl must be seconds > 0"),
    (lambda: After("abc"), TypeError, "list of jids"),
    (lambda: After(["j1"], on_failure="ignore"), ValueError, "on_parent_failure must be"),
    (lambda: After([], pass_result=True), ValueError, "exactly one job"),
    (lambda: RetryPolicy(max=-1), ValueError, "retry must be >= 0"),
    (lambda: RetryPolicy(discard_on=(int,)), TypeError, "discard_on takes exception"),
    (lambda: RetryPolicy(delay="soon"), TypeError, "delay must be seconds, a timedelta or fn"),
    (lambda: Group(3), TypeError, "group must be a str or a function"),
    (lambda: Group("a", limit=0), ValueError, "Group's limit must be from 1"),
])
def test_a_bad_value_is_refused_where_it_is_made(make: Callable[[], object],
                                                 error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()


async def test_bad_keywords_are_refused_at_the_call_naming_the_problem(
    make_app: Callable[..., App],
) -> None:
    app = make_app(group_limits={"default": 1})

    @app.job(name="note")
    async def note(key: str) -> None: ...

    loose: dict[str, Any] = {"jid": "one"}
    loose_bogus: dict[str, Any] = {"bogus": 1}
    with pytest.raises(TypeError, match="jid"):
        app.job(**loose)  # a jid names one enqueue: no decorator has one
    with pytest.raises(TypeError, match="registered name"):
        note.options(**{"name": "other"})  # noqa: PIE804 (not a keyword mypy allows)
    with pytest.raises(TypeError, match="unexpected option 'bogus'"):
        note.options(**loose_bogus)
    with pytest.raises(TypeError, match="dedup takes Unique"):
        note.options(dedup=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="or throttle=, not both"):
        note.options(dedup=Throttle(5), throttle=5)
    with pytest.raises(ValueError, match="or pass_result=, not both"):
        note.options(after=After(["j1"]), pass_result=True)
    with pytest.raises(ValueError, match="or retry_in=, not both"):
        app.job(retry=RetryPolicy(max=1), retry_in=lambda attempt, error: 1.0)
    with pytest.raises(ValueError, match=r"declare them on @jobs\.job"):
        note.options(retry=RetryPolicy(max=1, delay=5))
    with pytest.raises(ValueError, match=r"declare them on @jobs\.job"):
        note.options(discard_on=[KeyError])
    with pytest.raises(ValueError, match="group limit is 1 already"):
        app.job(group=Group("g", limit=2))
    with pytest.raises(ValueError, match=r"a limit is declared on @jobs\.job"):
        note.options(group=Group("g", limit=3))
    assert note.options(group=Group("g", limit=1)).job_options.group == "g"  # the same
    with pytest.raises(ValueError, match="expires_in or expires_at"):
        note.options(expires_in=5, expires_at=time.time() + 10)


async def _is(app: App, jid: str | None, state: str) -> bool:
    return await _state(app, jid) == state
