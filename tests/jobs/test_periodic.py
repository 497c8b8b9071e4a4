from datetime import UTC, datetime

import pytest

from cogworker_async.jobs.periodic import Periodic, parse_tz, tick_to_claim


def epoch(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def test_ticks_of_a_five_minute_schedule() -> None:
    every5 = Periodic("m.cleanup", "*/5 * * * *", UTC)
    now = epoch(2030, 1, 1, 12, 7, 30)
    assert every5.latest_tick(now) == epoch(2030, 1, 1, 12, 5)
    assert every5.next_tick(now) == epoch(2030, 1, 1, 12, 10)


def test_a_tick_exactly_now_is_due_now() -> None:
    every5 = Periodic("m.cleanup", "*/5 * * * *", UTC)
    assert every5.latest_tick(epoch(2030, 1, 1, 12, 5)) == epoch(2030, 1, 1, 12, 5)


def test_seconds_schedules_tick_every_second() -> None:
    each = Periodic("m.tick", "* * * * * *", UTC)
    assert each.latest_tick(epoch(2030, 1, 1) + 3.4) == epoch(2030, 1, 1) + 3


def test_timezones() -> None:
    paris = Periodic("m.report", "0 9 * * *", parse_tz("Europe/Paris"))
    assert paris.next_tick(epoch(2030, 1, 1, 0, 0)) == epoch(2030, 1, 1, 8, 0)


def test_invalid_schedules_are_refused() -> None:
    with pytest.raises(ValueError, match="invalid cron"):
        Periodic("m.x", "every monday", UTC)


def test_one_catch_up_run_after_an_outage_not_a_flood() -> None:
    hourly = Periodic("m.h", "0 * * * *", UTC)
    last = epoch(2030, 1, 1, 1, 0)
    now = epoch(2030, 1, 1, 5, 30)  # four ticks missed
    assert tick_to_claim(hourly, now, last, grace=5) == epoch(2030, 1, 1, 5, 0)
    assert tick_to_claim(hourly, now, epoch(2030, 1, 1, 5, 0), grace=5) is None


def test_a_new_schedule_waits_for_its_next_tick() -> None:
    hourly = Periodic("m.h", "0 * * * *", UTC)
    assert tick_to_claim(hourly, epoch(2030, 1, 1, 5, 30), None, grace=5) is None
    assert tick_to_claim(hourly, epoch(2030, 1, 1, 5, 0, 2), None, grace=5) == epoch(
        2030, 1, 1, 5, 0)


def test_a_periodic_tick_carries_its_job_s_deadline() -> None:
    """``jobs.periodic(..., expires_in=60)``: a tick not started within a minute (a
    backlog, a paused queue) is skipped rather than run late."""
    import json
    import time

    from cogworker_async import App
    from cogworker_async.worker.cron import periodic_job

    jobs = App("redis://127.0.0.1:1/0")

    @jobs.periodic("* * * * *", expires_in=60)
    async def report() -> None:
        pass

    @jobs.periodic("* * * * *", name="plain")
    async def plain() -> None:
        pass

    before = time.time()
    _, raw = periodic_job(jobs.registry, jobs.periodics[report.name], 0.0)
    assert before + 60 <= json.loads(raw)["expires_at"] <= time.time() + 60
    _, raw = periodic_job(jobs.registry, jobs.periodics["plain"], 0.0)
    assert "expires_at" not in json.loads(raw)
