"""An enqueue that raised wrote nothing; one that wrote returns its jid.

Each test names the hole it closes: a refused wake-up after the push, arguments JSON
would change, queue names with a trailing newline, infinite delays and lock TTLs.
"""

from __future__ import annotations

import enum
import logging
import math
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest

from cogworker_async import App
from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings, check_queue_name
from tests.servers import ServerProcess
from tests.waiting import wait_until


@pytest.fixture
def no_channel_user(redis_server: ServerProcess) -> str:
    """A Redis 7 ACL user that may use every key and command, but no pub/sub channel."""
    import redis

    name, password = f"nochan-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with redis.Redis(port=redis_server.port) as admin:
        admin.execute_command("ACL", "SETUSER", name, "on", f">{password}", "~*",
                              "resetchannels", "+@all")
    return f"redis://{name}:{password}@127.0.0.1:{redis_server.port}/0"


async def test_a_refused_wake_up_never_turns_a_push_into_an_error(
    no_channel_user: str, namespace: str, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = App(no_channel_user, namespace=namespace)

    @jobs.job(name="plain")
    async def plain(n: int) -> None: ...

    @jobs.job(name="single", unique=True)
    async def single(n: int) -> None: ...

    try:
        with caplog.at_level(logging.WARNING):
            jids = [await plain.enqueue(1), await plain.enqueue(2), await single.enqueue(3)]
            jids += await plain.enqueue_many([((4,), {}), ((5,), {})])
    finally:
        await jobs.close()
    assert all(jids), jids  # every push returned its jid: a caller has no reason to retry
    assert await store.client.llen(store.keys.queue("default")) == 5  # and none twice
    refusals = [r for r in caplog.records if "refused to publish the wake-up" in r.message]
    assert len(refusals) == 1  # said once, not per enqueue
    assert store.keys.wake_channel in refusals[0].getMessage()


async def test_a_worker_whose_enqueuers_cannot_publish_still_runs_their_jobs(
    no_channel_user: str, make_app: Callable[..., App], namespace: str
) -> None:
    ran: list[int] = []
    worker_app = make_app()

    @worker_app.job(name="note")
    async def note(n: int) -> None:
        ran.append(n)

    client = App(no_channel_user, namespace=namespace)
    client.job(name="note")(note.definition.func)
    try:
        async with worker_app.worker():
            await client.enqueue("note", 7)
            await wait_until(lambda: ran == [7], timeout=10)
    finally:
        await client.close()


class Color(enum.IntEnum):
    RED = 1


class Mood(enum.StrEnum):
    HAPPY = "happy"


LOSSY: list[tuple[str, Any]] = [
    ("int and str keys that collapse", {1: "a", "1": "b"}),
    ("an int key", {1: "a"}),
    ("a float key", {1.5: "a"}),
    ("a None key", {None: "a"}),
    ("a bool key", {True: "a"}),
    ("a tuple", (1, 2)),
    ("a nested tuple", [{"a": (1,)}]),
    ("an IntEnum", Color.RED),
    ("a str Enum", Mood.HAPPY),
    ("an OrderedDict", OrderedDict(a=1)),
    ("a set", {1, 2}),
    ("bytes", b"x"),
    ("NaN", math.nan),
    ("infinity", math.inf),
    ("a nested infinity", {"a": [-math.inf]}),
]


@pytest.mark.parametrize(("what", "value"), LOSSY, ids=[w for w, _ in LOSSY])
async def test_arguments_json_would_change_are_refused_and_nothing_is_written(
    make_app: Callable[..., App], store: Store, what: str, value: Any
) -> None:
    jobs = make_app()

    @jobs.job(name="takes")
    async def takes(value: Any = None) -> None: ...

    with pytest.raises((TypeError, ValueError)):
        await takes.enqueue(value)
    with pytest.raises((TypeError, ValueError)):
        await takes.enqueue(value=value)
    with pytest.raises((TypeError, ValueError)):
        await takes.enqueue_in(60, value)
    with pytest.raises((TypeError, ValueError)):
        await takes.enqueue_many([((value,), {})])
    assert await store.client.llen(store.keys.queue("default")) == 0
    assert await store.client.zcard(store.keys.schedule("default")) == 0


async def test_a_refusal_says_what_would_change(make_app: Callable[..., App]) -> None:
    jobs = make_app()

    @jobs.job(name="takes")
    async def takes(value: Any) -> None: ...

    with pytest.raises(TypeError, match=r"dict key 1 \(int\) is not a str"):
        await takes.enqueue({1: "a", "1": "b"})
    with pytest.raises(TypeError, match="tuple"):
        await takes.enqueue((1, 2))


async def test_arguments_json_carries_arrive_exactly(
    make_app: Callable[..., App]
) -> None:
    jobs = make_app()
    received: list[Any] = []

    @jobs.job(name="keeps")
    async def keeps(*args: Any, **kwargs: Any) -> None:
        received.append((args, kwargs))

    args = ("é 🎉", 10**40, -0.5, True, None, [1, [2, {"k": "v"}]], {"": {"nested": []}})
    async with jobs.worker():
        await keeps.enqueue(*args, key={"x": [1.25]})
        await wait_until(lambda: bool(received), timeout=10)
    assert received == [(args, {"key": {"x": [1.25]}})]
    assert type(received[0][0][1]) is int


@pytest.mark.parametrize("name", ["a\n", "a\r\n", "\na", "a b", "", "é", "a{b}", "x" * 129])
def test_queue_names_are_matched_whole(name: str) -> None:
    with pytest.raises(ValueError, match="invalid queue name"):
        check_queue_name(name)
    with pytest.raises(ValueError, match="invalid queue name"):
        Settings(queues=[name])


async def test_a_queue_name_with_a_newline_is_refused_at_enqueue(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job(name="somewhere")
    async def somewhere() -> None: ...

    with pytest.raises(ValueError, match="invalid queue name"):
        await somewhere.options(queue="a\n").enqueue()
    assert await store.client.keys(f"{store.keys.namespace}:*") == []


# A negative delay is "now" (arq's _defer_by): tests/worker/test_arq_habits.py.
@pytest.mark.parametrize("delay", [math.inf, -math.inf, math.nan])
async def test_delays_must_be_finite(
    make_app: Callable[..., App], store: Store, delay: Any
) -> None:
    jobs = make_app()

    @jobs.job(name="later")
    async def later() -> None: ...

    with pytest.raises(ValueError, match="delay"):
        await later.enqueue_in(delay)
    with pytest.raises((TypeError, ValueError)):
        await later.enqueue_at(math.inf if isinstance(delay, float) else delay)
    assert await store.client.zcard(store.keys.schedule("default")) == 0


@pytest.mark.parametrize("ttl", [math.inf, 1e30, math.nan, 0, -1])
def test_an_impossible_unique_ttl_is_refused_at_decoration(ttl: float) -> None:
    jobs = App("redis://127.0.0.1:1/0")
    with pytest.raises(ValueError, match="unique_ttl"):
        jobs.job(unique=True, unique_ttl=ttl)


@pytest.mark.parametrize("timeout", [math.inf, math.nan, 0])
def test_an_impossible_timeout_is_refused_at_decoration(timeout: float) -> None:
    jobs = App("redis://127.0.0.1:1/0")
    with pytest.raises(ValueError, match="timeout"):
        jobs.job(timeout=timeout)


@pytest.mark.parametrize(("setting", "value"), [
    ("concurrency", 1_000_000_000), ("concurrency", 0), ("prefetch", 10**9),
    ("sync_threads", 10**9), ("shutdown_timeout", math.inf), ("dead_max_jobs", 0),
    ("dead_max_age", math.inf), ("max_payload_bytes", 10**12), ("poll_interval", math.nan),
])
def test_sizes_and_durations_are_bounded_at_start(setting: str, value: Any) -> None:
    with pytest.raises(ValueError, match=setting):
        Settings(**{setting: value})


@pytest.mark.parametrize(("asked", "due_in"), [
    (math.inf, 366 * 24 * 3600.0), (1e300, 366 * 24 * 3600.0), (-5.0, 0.0), (30.0, 30.0),
])
def test_a_delay_a_job_asks_for_always_comes_due(asked: float, due_in: float) -> None:
    """``raise Retry(in_=inf)`` or a ``retry_in`` returning 1e300 must not file a retry
    with a score no poller reaches (the job would be lost in the retry set)."""
    from cogworker_async.worker.outcome import RetryDelays, after_failure

    filed = after_failure({"jid": "j", "class": "c", "retry": 3}, RuntimeError("x"), now=0.0,
                          policy=RetryDelays(1.0, 10.0), delay=lambda: asked)
    assert filed.target == "retry"
    assert filed.delay == due_in


def test_a_nan_delay_falls_back_to_the_default_backoff() -> None:
    from cogworker_async.worker.outcome import RetryDelays, after_failure

    filed = after_failure({"jid": "j", "class": "c", "retry": 3}, RuntimeError("x"), now=0.0,
                          policy=RetryDelays(1.0, 10.0), delay=lambda: math.nan)
    assert 0.0 <= filed.delay <= 10.0
