"""An enqueue with no Redis listening says which URL, where it came from, and what to do
(issue 45 item 4), instead of redis-py's bare ``Error 111 connecting to ...``."""

from __future__ import annotations

import anyio
import pytest
import redis.exceptions

from cogworker_async import App, CogworkerError, RedisUnreachable
from tests.servers import free_port


def _enqueue_fails(jobs: App) -> RedisUnreachable:
    @jobs.job()
    async def send_email(to: str) -> None: ...

    async def call() -> RedisUnreachable:
        try:
            with pytest.raises(RedisUnreachable) as caught:
                await send_email.enqueue("a@example.com")
        finally:
            await jobs.close()
        return caught.value

    return anyio.run(call)


def test_app_redis_url_unreachable_names_url_source_and_what_to_do() -> None:
    port = free_port()
    error = _enqueue_fails(App(f"redis://:s3cret@127.0.0.1:{port}/0"))
    message = str(error)
    assert f"redis://:***@127.0.0.1:{port}/0" in message
    assert "s3cret" not in message
    assert "App(redis_url=...)" in message
    assert "nothing was enqueued" in message
    assert "Start it, or pass the right URL" in message
    # Still what code that caught redis-py's error (or an OS ConnectionError) catches.
    assert isinstance(error, redis.exceptions.ConnectionError)
    assert isinstance(error, ConnectionError)
    assert isinstance(error, CogworkerError)
    assert isinstance(error.__cause__, redis.exceptions.ConnectionError)


def test_environment_url_unreachable_names_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("COGWORKER_REDIS_URL", f"redis://127.0.0.1:{port}")
    message = str(_enqueue_fails(App()))
    assert f"redis://127.0.0.1:{port}" in message
    assert "$COGWORKER_REDIS_URL" in message
    assert "set COGWORKER_REDIS_URL to the right URL" in message
