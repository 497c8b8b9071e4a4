"""Stored text that is not valid Unicode, as the web and CLI tests store it: a job whose
every text field holds a lone surrogate, an entry of bytes that are not UTF-8, and beats
and events that hold lone surrogates too."""

from __future__ import annotations

import json
from typing import Final

import redis

from cogworker_async.redis.keys import Keys

REPLACED: Final = "\ufffd"
"""What every view shows in place of a character (or byte) that is not valid Unicode."""


BROKEN: Final = {
    "jid": "jid\ud800", "class": "job\ud800name", "queue": "default",
    "args": ["arg\ud800x"], "kwargs": {"key\udfff": "value\ud800"},
    "error_class": "Error\ud800", "error_message": "message\ud800y",
    "error_backtrace": ["line\ud800\n"], "retry_count": 1, "enqueued_at": 1.0,
}
"""A job whose every text field holds a lone surrogate (json.dumps writes ``\\ud800``)."""
NOT_UTF8: Final = b"raw \xff\xfe bytes"


def store_broken(client: redis.Redis, keys: Keys) -> None:
    """The broken job and the non-UTF-8 entry on queue ``default`` and in each set; a
    beat and a recovery event holding lone surrogates."""
    raw = json.dumps(BROKEN).encode()
    assert b"\\ud800" in raw
    client.sadd(keys.queues, "default")
    client.lpush(keys.queue("default"), raw, NOT_UTF8)
    for key in (keys.schedule("default"), keys.retry("default"), keys.dead("default")):
        client.zadd(key, {raw: 1.0, NOT_UTF8: 2.0})
    client.hset(keys.beats, "w-1", json.dumps({"hostname": "host\ud800",
                                               "queues": ["q\ud800"]}))
    client.lpush(keys.recoveries, json.dumps({"at": 1.0, "identity": "who\ud800"}))
