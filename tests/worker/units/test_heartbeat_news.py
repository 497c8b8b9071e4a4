"""A beat's news from one slot is passed on even when another slot's beat failed.

A process beats in the namespace's slot and in each served queue's. When one slot says
its keys were lost (FORGOTTEN: that beat re-registered it) while another slot's beat
fails, the news must still reach the fence: the next round would say ALIVE there, and
the settles whose effect was lost with the keys would be taken as done — lost jobs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.keys import Keys
from cogworker_async.worker.heartbeat import Heartbeat


@pytest.fixture
def sync_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def heartbeat_of(writer: BeatWriter, news: list[object]) -> Heartbeat:
    return Heartbeat(writer, interval=0.2, ttl=2.0, describe=dict, current_jobs=list,
                     on_zombie=lambda: news.append("zombie"),
                     on_forgotten=lambda slots: news.append(("forgotten", slots)),
                     on_alive=lambda beat: news.append(("alive", beat)))


def test_lost_keys_are_said_even_when_another_slot_fails(
    redis_url: str, namespace: str, sync_redis: redis.Redis
) -> None:
    keys = Keys(namespace)
    writer = BeatWriter(redis_url, keys, "p1", ["a", "b"])
    news: list[object] = []
    heartbeat = heartbeat_of(writer, news)
    try:
        heartbeat.beat()
        assert news == [("alive", 1)]
        sync_redis.delete(keys.queue_process("a", "p1"), keys.queue_last_beat("a"))  # lost
        sync_redis.delete(keys.queue_last_beat("b"))
        sync_redis.set(keys.queue_last_beat("b"), "not a hash")  # b's beat fails
        # The failed slot's error names the keys to look at (issue 25: not a bare
        # WRONGTYPE); the other slot's news is said all the same.
        with pytest.raises(ConfigurationError, match="cannot write this process's beat"):
            heartbeat.beat()
        assert news[1:] == [("forgotten", frozenset({"a"}))]
    finally:
        writer.close()


def test_a_zombie_with_lost_keys_elsewhere_says_both_lost_keys_first(
    redis_url: str, namespace: str, sync_redis: redis.Redis
) -> None:
    """Fencing must know which lists were lost before it judges what is not listed."""
    keys = Keys(namespace)
    writer = BeatWriter(redis_url, keys, "p1", ["a", "b"])
    news: list[object] = []
    heartbeat = heartbeat_of(writer, news)
    try:
        heartbeat.beat()
        sync_redis.delete(keys.queue_process("a", "p1"), keys.queue_last_beat("a"))
        sync_redis.sadd(keys.queue_declared_dead("b"), "p1")  # recovery took b's jobs
        heartbeat.beat()
        assert news[1:] == [("forgotten", frozenset({"a"})), "zombie"]
    finally:
        writer.close()
