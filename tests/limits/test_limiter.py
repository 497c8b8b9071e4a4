"""The limiters' pure parts: what a limiter may be, how long a waiter pauses, how a
refused job is rescheduled, and how its run is reported — no Redis."""

from __future__ import annotations

import random
from typing import Any, cast

import pytest

from cogworker_async import App, ConfigurationError, OverLimit, Settings
from cogworker_async.jobs.wire import Payload
from cogworker_async.limits.limiter import (
    FIRST_POLL,
    MAX_POLL,
    LimitSpec,
    check_name,
    next_pause,
    spec_of,
)
from cogworker_async.redis.limits import holder_member, identity_of
from cogworker_async.worker import outcome
from cogworker_async.worker.observers import NOT_FAILED, OUTCOMES, RunReport, outcome_of

URL = "redis://127.0.0.1:1/0"  # never connected to: nothing here talks to Redis


# -- what a limiter may be ----------------------------------------------------------------


def test_each_kind_makes_its_spec() -> None:
    assert spec_of(concurrent=3) == LimitSpec("concurrent", 3)
    assert spec_of(per_window=(5, 1)) == LimitSpec("window", 5, 1.0)
    assert spec_of(bucket=(10, 0.5)) == LimitSpec("bucket", 10, 0.5)


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({}, ValueError, "exactly one of"),
    ({"concurrent": 2, "bucket": (1, 1)}, ValueError, "exactly one of"),
    ({"concurrent": 0}, ValueError, "concurrent must be between 1"),
    ({"concurrent": True}, TypeError, "concurrent must be an int"),
    ({"concurrent": 2.5}, TypeError, "concurrent must be an int"),
    ({"per_window": (0, 1)}, ValueError, "per_window's N must be between 1"),
    ({"per_window": (5, 0)}, ValueError, "per_window's seconds must be a finite number"),
    ({"per_window": (5, -1)}, ValueError, "per_window's seconds"),
    ({"bucket": (5, float("inf"))}, ValueError, "bucket's seconds"),
    ({"bucket": (5, float("nan"))}, ValueError, "bucket's seconds"),
    # Shorter than the scripts' millisecond: it failed in Redis at every acquisition.
    ({"per_window": (5, 1e-300)}, ValueError, r"per_window's seconds must be at least 0\.001"),
    ({"bucket": (5, 0.0009)}, ValueError, r"bucket's seconds must be at least 0\.001"),
    ({"bucket": 5}, TypeError, r"bucket must be a pair \(N, seconds\)"),
    ({"bucket": (5, "1")}, TypeError, "bucket's seconds must be a number"),
])
def test_a_bad_limiter_is_refused_with_the_problem_named(
    kwargs: dict[str, Any], error: type[Exception], words: str,
) -> None:
    with pytest.raises(error, match=words):
        spec_of(**kwargs)


@pytest.mark.parametrize("name", ["", "a b", "{tag}", "x" * 129, "tab\there"])
def test_a_limiter_name_must_fit_in_key_names(name: str) -> None:
    with pytest.raises(ValueError, match="invalid limiter name"):
        check_name(name)


def test_the_app_registers_each_limiter_once() -> None:
    app = App(URL)
    payments = app.limiter("payments", concurrent=3, wait=1)

    assert app.limiter("payments", concurrent=3, wait=1) is payments
    assert app.limiters == {"payments": payments}
    with pytest.raises(ConfigurationError, match="'payments' is already defined"):
        app.limiter("payments", concurrent=4, wait=1)
    with pytest.raises(ConfigurationError, match="already defined"):
        app.limiter("payments", concurrent=3, wait=2)


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"wait": -1}, ValueError), ({"wait": float("inf")}, ValueError),
    ({"wait": "1"}, TypeError), ({"lease": 0}, ValueError),
])
def test_bad_waits_and_leases_are_refused(kwargs: dict[str, Any],
                                          error: type[Exception]) -> None:
    with pytest.raises(error):
        App(URL).limiter("x", concurrent=1, **kwargs)


def test_max_limit_reschedules_is_checked() -> None:
    assert Settings().max_limit_reschedules == 20
    assert Settings(max_limit_reschedules=0).max_limit_reschedules == 0
    with pytest.raises(ValueError, match="max_limit_reschedules"):
        Settings(max_limit_reschedules=-1)
    with pytest.raises(TypeError, match="max_limit_reschedules"):
        Settings(max_limit_reschedules=2.0)  # type: ignore[arg-type]


# -- holders as stored --------------------------------------------------------------------


def test_a_holder_names_its_process_or_holds_a_lease() -> None:
    worker = holder_member("host:1:abc", "j1", "t", 300)
    caller = holder_member(None, "-", "t", 300)

    assert identity_of(worker) == "host:1:abc"
    assert identity_of(caller.encode()) is None
    assert identity_of("planted by hand") is None
    with pytest.raises(ValueError, match="cannot be empty or hold a tab"):
        holder_member("a\tb", "j1", "t", 300)


# -- waiting ------------------------------------------------------------------------------


def test_waiting_backs_off_with_jitter_and_never_spins() -> None:
    rng = random.Random(1)
    pauses = [next_pause(tries, None, 10.0, rng) for tries in range(12)]

    assert all(p is not None and p > 0 for p in pauses)
    assert cast(float, pauses[0]) <= FIRST_POLL * 1.5
    assert max(cast(list[float], pauses)) <= MAX_POLL * 1.5
    assert cast(float, pauses[-1]) >= MAX_POLL * 0.5


def test_waiting_sleeps_until_a_window_or_token_is_due() -> None:
    pause = next_pause(0, 0.4, 10.0, random.Random(1))

    assert pause is not None
    assert 0.4 < pause <= 0.4 + FIRST_POLL * 1.5


def test_waiting_gives_up_when_no_time_is_left_or_nothing_comes_in_time() -> None:
    assert next_pause(0, None, 0.0) is None
    assert next_pause(3, 2.0, 1.0) is None
    assert next_pause(0, None, 0.003, random.Random(1)) == pytest.approx(0.003)


# -- a refused run ------------------------------------------------------------------------


def payload(**extra: object) -> Payload:
    return cast(Payload, {"jid": "j1", "class": "m.f", "args": [], "kwargs": {},
                          "queue": "default", "retry": 2, **extra})


def test_a_refused_run_is_rescheduled_without_counting_a_retry() -> None:
    filed = outcome.after_over_limit(payload(retry_count=1), OverLimit("payments"),
                                     now=100.0, max_reschedules=20, rng=random.Random(0))

    assert filed is not None
    assert (filed.target, filed.terminal) == ("retry", False)
    assert 1.0 <= filed.delay <= 1.5
    entry = cast(dict[str, Any], filed.entry)
    assert entry["retry_count"] == 1  # unchanged: not a retry
    assert (entry["limited_count"], entry["limited_at"]) == (1, 100.0)
    assert entry["error_class"] == "OverLimit"
    assert "payments" in entry["error_message"]


def test_reschedules_back_off_and_wait_at_least_for_the_limiter() -> None:
    fifth = outcome.after_over_limit(payload(limited_count=4), OverLimit("x"), now=1.0,
                                     max_reschedules=20, rng=random.Random(0))
    windowed = outcome.after_over_limit(payload(), OverLimit("x", retry_after=30.0), now=1.0,
                                        max_reschedules=20, rng=random.Random(0))

    assert fifth is not None
    assert 16.0 <= fifth.delay <= 24.0  # 1, 2, 4, 8, 16 s, +50 % jitter at most
    assert windowed is not None
    assert 30.0 <= windowed.delay <= 45.0


def test_the_default_reschedules_wait_out_hours_of_backlog_not_minutes() -> None:
    """A retry=False payment job behind a busy limiter must not die within minutes."""
    total, entry = 0.0, payload()
    for _ in range(20):
        filed = outcome.after_over_limit(entry, OverLimit("x"), now=1.0, max_reschedules=20,
                                         rng=random.Random(0))
        assert filed is not None
        assert filed.delay <= outcome.MAX_LIMIT_BACKOFF * 1.5
        total, entry = total + filed.delay, filed.entry
    assert total > 6 * 3600, total


def test_past_its_reschedules_a_refusal_is_a_failure_like_any_other() -> None:
    assert outcome.after_over_limit(payload(limited_count=3), OverLimit("x"), now=1.0,
                                    max_reschedules=3) is None
    assert outcome.after_over_limit(payload(), OverLimit("x"), now=1.0,
                                    max_reschedules=0) is None


def test_a_bad_limited_count_counts_as_none() -> None:
    assert outcome.limited_count(payload(limited_count="7")) == 0
    assert outcome.limited_count(payload(limited_count=True)) == 0
    assert outcome.limited_count(payload(limited_count=-2)) == 0


def test_a_limited_run_is_its_own_outcome_and_no_failure() -> None:
    filed = outcome.after_over_limit(payload(), OverLimit("x"), now=1.0, max_reschedules=5)
    assert filed is not None

    assert outcome_of(filed, discarded=False, limited=True) == "limited"
    assert "limited" in OUTCOMES
    assert "limited" in NOT_FAILED
    report = RunReport(name="m.f", queue="default", jid="j1", outcome="limited",
                       duration=0.1, ended_at=1.0, enqueued_at=None, started_at=0.9)
    assert not report.failed


def test_over_limit_says_which_limiter_and_when() -> None:
    error = OverLimit("emails", retry_after=1.25)

    assert (error.limiter, error.retry_after) == ("emails", 1.25)
    assert str(error) == "limiter 'emails' is over its limit (may admit again in 1.250s)"
