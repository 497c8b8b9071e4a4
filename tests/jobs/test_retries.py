"""retries.py: one formula for how attempts are counted, wherever they are read."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from cogworker_async.jobs import retries


@pytest.mark.parametrize(("retry", "expected"), [
    (True, 25), (None, 25), (False, 0), (0, 0), (3, 3), (-1, 0), ("5", 0), (2.5, 0),
])
def test_max_retries(retry: object, expected: int) -> None:
    assert retries.max_retries(retry) == expected


@pytest.mark.parametrize(("stored", "failures", "attempt"), [
    ({}, 0, 1),                          # never failed: first run
    ({"retry_count": 0}, 1, 2),          # failed once (Sidekiq: retry_count 0)
    ({"retry_count": 4}, 5, 6),
    ({"retry_count": "x"}, 0, 1),        # bad data counts as no failure, everywhere
    ({"retry_count": True}, 0, 1),
    ({"retry_count": 2.0}, 0, 1),
])
def test_one_formula_for_failures_attempts_and_the_next_count(
    stored: dict[str, Any], failures: int, attempt: int
) -> None:
    assert retries.failures(stored) == failures
    assert retries.next_count(stored) == failures
    assert retries.attempt_of(stored) == attempt


def test_retry_n_allows_n_runs_after_the_first() -> None:
    payload: dict[str, Any] = {"retry": 2}
    runs = 1
    while not retries.exhausted(payload, retries.next_count(payload)):
        payload["retry_count"] = retries.next_count(payload)
        runs += 1
    assert runs == 3


def test_the_backoff_doubles_within_the_jitter_and_is_capped() -> None:
    rng = random.Random(7)
    for count in range(6):
        value = retries.delay(count, base=15.0, cap=1e9, rng=rng)
        ideal = 15.0 * 2**count
        assert ideal * (1 - retries.JITTER) <= value <= ideal * (1 + retries.JITTER)
    assert retries.delay(500, base=15.0, cap=3600.0) <= 3600.0


@pytest.mark.parametrize(("asked", "kept"), [
    (30.0, 30.0), (-5.0, 0.0), (math.inf, retries.MAX_ASKED_DELAY), (math.nan, None),
])
def test_a_delay_a_job_asks_for_is_kept_within_bounds(asked: float, kept: float | None) -> None:
    assert retries.asked_delay(asked) == kept


@pytest.mark.parametrize(("stored", "after"), [
    ({"retry_count": 3}, {"retry_count": 2}),
    ({"retry_count": 0}, {}),
    ({}, {}),
    ({"retry_count": "x"}, {"retry_count": "x"}),
])
def test_a_manual_retry_gives_the_attempt_back(
    stored: dict[str, Any], after: dict[str, Any]
) -> None:
    retries.for_manual_retry(stored)
    assert stored == after


@pytest.mark.parametrize("bad", [-1, "3", 1.5, None])
def test_check_retry_refuses_what_is_not_a_retry_count(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        retries.check_retry(bad)
