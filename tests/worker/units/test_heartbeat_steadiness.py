"""A process whose own beats failed (Redis away) judges nobody dead until its beats have
succeeded again for the threshold — the first beat's tries at start-up included: a
worker that reached Redis just as it came back must not take the live processes, whose
stamps are all stale, for dead."""

from __future__ import annotations

import time

import pytest

from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.keys import Keys
from cogworker_async.worker.heartbeat import Heartbeat
from tests.servers import ServerProcess

INTERVAL, THRESHOLD = 0.1, 0.6


def test_failed_first_beats_count_and_the_wait_starts_at_the_first_success(
    namespace: str,
) -> None:
    server = ServerProcess()
    writer = BeatWriter(f"redis://127.0.0.1:{server.port}/0", Keys(namespace), "judge",
                        ["q"], timeout=0.5)
    heartbeat = Heartbeat(writer, interval=INTERVAL, ttl=2.0, describe=dict,
                          current_jobs=list, on_zombie=lambda: None)
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - refused: Redis is not up yet
            heartbeat.beat()  # what Manager._first_beat tries, then tries again
        assert heartbeat.last_failure is not None
        server.start()
        first_success = time.monotonic()  # before: the run begins no earlier than this
        heartbeat.beat()
        assert not heartbeat.steady_in("q", THRESHOLD)
        assert not heartbeat.steady_in("served-by-others", THRESHOLD)
        while time.monotonic() - first_success < THRESHOLD:
            assert not heartbeat.steady_in("q", THRESHOLD)
            time.sleep(INTERVAL)  # the heartbeat's own pace, not a wait for luck
            heartbeat.beat()
        assert heartbeat.steady_in("q", THRESHOLD)
        assert heartbeat.steady_in("served-by-others", THRESHOLD)
    finally:
        writer.close()
        server.cleanup()
