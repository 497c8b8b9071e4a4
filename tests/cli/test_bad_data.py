"""The admin CLI on stored data no worker wrote: text that looks like rich markup, beats
of the wrong types, numbers JSON cannot carry. Every command still prints (tables show
the text as it is; ``--json`` stays JSON) and exits 0, never with a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
import redis

from cogworker_async.redis.keys import Keys
from tests.cli import adminapp
from tests.cli.conftest import invoke


@pytest.fixture
def raw(jobs: adminapp.Jobs, redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"not JSON: {name}")


def strict_json(command: str, *args: str) -> Any:
    result = invoke(command, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout, parse_constant=refuse_constant)


def test_text_that_looks_like_markup_is_shown_as_it_is(raw: redis.Redis, keys: Keys) -> None:
    job = {"jid": "j1", "class": "[/odd]", "args": ["[bold]x[/bold]", ":thumbs_up:"]}
    raw.sadd(keys.queues, "default")
    raw.lpush(keys.queue("default"), json.dumps(job))
    raw.zadd(keys.dead("default"),
             {json.dumps({**job, "error_class": "E", "error_message": "[/z]"}): 1.0})
    for command, *args in (("queues", "default"), ("dead",), ("dead", "--search", "[/")):
        result = invoke(command, *args)
        assert result.exit_code == 0, result.output
        assert "[/odd]" in result.stdout
        assert '"[bold]x[/bold]", ":thumbs_up:"' in result.stdout


def test_processes_show_beats_of_the_wrong_types(raw: redis.Redis, keys: Keys) -> None:
    raw.hset(keys.beats, "w-1", json.dumps({"hostname": 5, "pid": "x", "queues": "q"}))
    raw.hset(keys.last_beat, "w-1", "nan")
    raw.set(keys.process("w-1"), "1")
    raw.hset(keys.workers("w-1"), "j-1", json.dumps({"class": 5, "queue": 7, "run_at": 1}))
    raw.lpush(keys.recoveries, json.dumps({"at": "yesterday", "identity": 5}))
    result = invoke("processes")
    assert result.exit_code == 0, result.output
    assert "w-1" in result.stdout
    [process] = strict_json("processes")["processes"]
    assert (process["hostname"], process["last_beat"]) == (None, None)
    assert process["running"][0]["queue"] is None


def test_json_output_is_json_even_for_nan_and_infinite_scores(raw: redis.Redis,
                                                             keys: Keys) -> None:
    raw.sadd(keys.queues, "default")
    raw.lpush(keys.queue("default"), '{"jid": "j1", "class": "c", "args": [NaN, -Infinity]}')
    raw.zadd(keys.dead("default"), {'{"jid": "j2", "class": "c", "args": [1]}': float("inf")})
    assert strict_json("queues", "default")["items"][0]["args"] == [None, None]
    [dead] = strict_json("dead")["items"]
    assert dead["score"] is None
