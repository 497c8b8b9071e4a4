"""Steadiness: a process judges others dead in a slot only after its own beats there have
succeeded without a break for the threshold (worker/steadiness.py)."""

from __future__ import annotations

from cogworker_async.worker.steadiness import Steadiness

GAP, THRESHOLD = 1.0, 3.0


def beats(steadiness: Steadiness, slot: str | None, start: float, end: float,
          every: float = 0.5) -> None:
    now = start
    while now <= end:
        steadiness.succeeded(slot, now)
        now += every


def test_a_process_that_just_started_judges_nobody_until_the_threshold() -> None:
    s = Steadiness(GAP)
    assert not s.steady("q", THRESHOLD, now=0.0)
    beats(s, "q", 0.0, 2.5)
    assert not s.steady("q", THRESHOLD, now=2.5)
    beats(s, "q", 3.0, 3.0)
    assert s.steady("q", THRESHOLD, now=3.0)


def test_a_failed_beat_starts_the_wait_again_in_its_slot_only() -> None:
    s = Steadiness(GAP)
    beats(s, "q", 0.0, 12.0)
    beats(s, "r", 0.0, 10.0)
    s.failed("r")
    beats(s, "r", 10.5, 12.0)
    assert s.steady("q", THRESHOLD, now=12.0)
    assert not s.steady("r", THRESHOLD, now=12.0)
    beats(s, "r", 12.5, 13.5)
    assert s.steady("r", THRESHOLD, now=13.5)


def test_a_freeze_between_two_successes_is_a_break() -> None:
    # The process (or the machine it shares with Redis) stopped for 20 s: when it
    # resumes its beats succeed, but the others' stamps may all be stale.
    s = Steadiness(GAP)
    beats(s, "q", 0.0, 10.0)
    beats(s, "q", 30.0, 31.0)
    assert not s.steady("q", THRESHOLD, now=31.0)
    beats(s, "q", 31.5, 33.0)
    assert s.steady("q", THRESHOLD, now=33.0)


def test_no_recent_success_is_not_steady() -> None:
    # A beat hanging (its node frozen) has not failed yet, but it has not succeeded.
    s = Steadiness(GAP)
    beats(s, "q", 0.0, 10.0)
    assert s.steady("q", THRESHOLD, now=10.5)
    assert not s.steady("q", THRESHOLD, now=12.0)


def test_every_slot_must_be_steady_for_a_slot_not_beaten_in() -> None:
    s = Steadiness(GAP)
    beats(s, "q", 0.0, 10.0)
    beats(s, None, 0.0, 10.0)
    assert s.all_steady(["q", None], THRESHOLD, now=10.0)
    s.failed(None)
    assert not s.all_steady(["q", None], THRESHOLD, now=10.0)
