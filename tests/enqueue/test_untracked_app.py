"""An App with ``track_jobs=False`` refuses, with a clear error, what needs records."""

from __future__ import annotations

import anyio
import pytest

from cogworker_async import App, ConfigurationError


def test_what_needs_records_is_refused_clearly() -> None:
    jobs = App("redis://127.0.0.1:1/0", track_jobs=False)  # never connected

    @jobs.job()
    async def plain() -> None: ...

    @jobs.job(keep_result=60)  # registered (an app module may serve both kinds)...
    async def valued() -> int:
        return 1

    async def calls() -> None:
        with pytest.raises(ConfigurationError, match="track_jobs=False"):
            await jobs.status("x")
        with pytest.raises(ConfigurationError, match="track_jobs=False"):
            await jobs.result("x", timeout=1)
        with pytest.raises(ConfigurationError, match="track_jobs=False"):
            await jobs.cancel("x")
        with pytest.raises(ConfigurationError, match="track_jobs=False"):
            await plain.options(jid="mine").enqueue()
        with pytest.raises(ConfigurationError, match="track_jobs=False"):
            await valued.enqueue()  # ...but not enqueued: no result could be kept

    anyio.run(calls)


def test_track_jobs_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="track_jobs"):
        App(track_jobs="no")


def test_a_basic_fetch_app_keeps_no_records_and_says_so() -> None:
    jobs = App("redis://127.0.0.1:1/0", fetch="basic")  # BRPOP: no script sees the job

    async def calls() -> None:
        with pytest.raises(ConfigurationError, match='fetch="basic"'):
            await jobs.cancel("x")

    anyio.run(calls)
