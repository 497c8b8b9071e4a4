"""Whatever is stored in the queues and the schedule, retry and dead sets, the admin
model reads it without an exception and every dashboard page renders (200; 404 only for
a queue name no queue can have).

Each queue has its own schedule, retry and dead set: an example spreads a set's entries
over the queues it names, and the pages show them merged.

Entries come from anywhere: another client, a hand-typed ZADD, a bug, an older version.
One bad entry must not take a page down: the page is how a person finds and removes it.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import quote

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cogworker_async import App
from cogworker_async.admin import Inspector, JobRecord, JobSet
from cogworker_async.redis.store import SetName, Store
from cogworker_async.settings import check_queue_name
from cogworker_async.web import create_dashboard
from tests.hypothesis_profiles import examples
from tests.strategies import (
    ANY_TEXT,
    deep_text,
    encoded,
    job_payloads,
    json_values,
    stored_bytes,
)
from tests.workbench import wipe

EXAMPLES: Final = examples(25)
BASE_URL: Final = "http://dashboard.test"
SET_PATHS: Final = {"schedule": "scheduled", "retry": "retries", "dead": "dead"}
"""Each set's Redis name and its dashboard path."""
PAGES: Final = ("/", "/stats.json", "/queues", "/busy", "/scheduled", "/retries", "/dead",
                "/periodic", "/scheduled?page=2", "/dead?page=2")
QUEUE_NAMES: Final = st.from_regex(re.compile(r"[A-Za-z0-9_.:\-]{1,20}"), fullmatch=True)
SCORES: Final = st.one_of(st.floats(allow_nan=False),
                          st.floats(min_value=0, max_value=4e9))  # around real epochs
SURROGATE_ENTRY: Final = encoded({"jid": "j", "class": "\ud800", "args": ["a\udc80b"],
                                  "kwargs": {"\udfff": 1}, "error_message": "\ud800"}, True)
"""A job whose text holds lone surrogates: valid JSON (written as escapes), read back as
str values Python cannot encode as UTF-8."""


@dataclass(frozen=True, slots=True)
class Stored:
    """What one example writes: queues (name -> jobs, oldest first), and per set
    (schedule, retry, dead) its members and their scores."""

    queues: dict[str, list[bytes]]
    odd_queue_names: list[bytes]
    """Members of the set of queue names that are no queue name at all."""
    sets: dict[str, dict[bytes, float]]
    homes: tuple[str, ...] = ("default",)
    """The queues whose sets hold the entries: a set's i-th entry goes to the set of
    ``homes[i % len(homes)]``."""


def stored(entries: st.SearchStrategy[bytes]) -> st.SearchStrategy[Stored]:
    members = st.dictionaries(entries, SCORES, max_size=4)
    return st.builds(
        Stored,
        queues=st.dictionaries(QUEUE_NAMES, st.lists(entries, max_size=4), max_size=2),
        odd_queue_names=st.lists(st.binary(min_size=1, max_size=12), max_size=2),
        sets=st.fixed_dictionaries(dict.fromkeys(SET_PATHS, members)),
        homes=st.lists(QUEUE_NAMES, min_size=1, max_size=3, unique=True).map(tuple),
    )


def entries(text: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Stored bytes, with job-shaped ones (fields of every type) drawn often: those are
    what the pages look into."""
    jobs = job_payloads(json_values(text, nan=True, leaves=12), text)
    return st.one_of(stored_bytes(text=text), st.builds(encoded, jobs, st.just(True)))


async def write(store: Store, data: Stored) -> None:
    client, keys = store.client, store.keys
    for name, raws in data.queues.items():
        await client.sadd(keys.queues, name)
        if raws:
            await client.lpush(keys.queue(name), *raws)
    if data.odd_queue_names:
        await client.sadd(keys.queues, *data.odd_queue_names)
    await client.sadd(keys.queues, *data.homes)
    for name, members in data.sets.items():
        for i, (member, score) in enumerate(members.items()):
            home = data.homes[i % len(data.homes)]
            await client.zadd(store.zset_key(home, cast(SetName, name)), {member: score})


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    jobs = make_app()

    @jobs.periodic("*/5 * * * *", name="prop.tick")
    async def tick() -> None: ...

    return jobs


@pytest.fixture
async def client(app: App) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_dashboard(app))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        yield http


def read_record(record: JobRecord) -> None:
    """Everything a page or ``--json`` asks of an entry."""
    for value in (record.token, record.jid, record.name, record.queue, record.args,
                  record.kwargs, record.error_class, record.error_message,
                  record.backtrace, record.retry_count, record.runnable,
                  record.display_args(), record.stamp("enqueued_at"),
                  record.stamp("failed_at")):
        assert value is not None or value is None  # each one read without raising
    json.dumps(record.as_dict(), default=repr)


def search_terms(data: Stored) -> list[str]:
    """A piece of an entry (what a person would type), and odd characters."""
    terms = ["*", "[\\", 'é"']
    for members in data.sets.values():
        for raw in members:
            text = raw[:24].decode("utf-8", "replace").strip()
            if text:
                terms.append(text[len(text) // 3:])
    return terms


async def read_set(jobs: JobSet, data: Stored) -> list[JobRecord]:
    page = await jobs.page(1)
    await jobs.page(2, size=2)
    for term in search_terms(data):
        for record in (await jobs.search(term)).items:
            read_record(record)
    for record in page.items:
        read_record(record)
        found = await jobs.find(record.token)
        assert found is not None
        assert found.raw == record.raw
    return page.items


async def read_everything(inspector: Inspector, data: Stored) -> dict[str, list[JobRecord]]:
    """Every read of the admin model; the entries listed on each set's first page."""
    await inspector.summary()
    await inspector.stats.history()
    await inspector.processes.all()
    await inspector.processes.burials()
    await inspector.periodic.all()
    for name in data.queues:
        queue = inspector.queue(name)
        await queue.info()
        for record in (await queue.page(1)).items:
            read_record(record)
            assert await queue.find(record.token) is not None
    return {path: await read_set(inspector.job_set(path), data)
            for path in SET_PATHS.values()}


async def assert_pages_render(client: httpx.AsyncClient, data: Stored,
                              listed: dict[str, list[JobRecord]]) -> None:
    paths = list(PAGES)
    paths += [f"/{kind}?q={quote(term, safe='')}" for kind in SET_PATHS.values()
              for term in search_terms(data)]
    paths += [f"/{kind}/job/{quote(record.token, safe='')}"
              for kind, records in listed.items() for record in records]
    for path in paths:
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text[-2000:])
    names = [*data.queues, *data.homes,
             *(raw.decode("utf-8", "replace") for raw in data.odd_queue_names)]
    for name in names:
        response = await client.get(f"/queues/{quote(name, safe='')}")
        assert response.status_code == expected_queue_status(name), (name, response.text)


def expected_queue_status(name: str) -> int:
    """200 for a name a queue can have; 404 for any other, or 307 to the same path
    without a trailing slash (the router's rule, before the name is looked at)."""
    try:
        check_queue_name(name)
    except ValueError:
        return 307 if name.endswith("/") and "/" not in name[:-1] and name != "/" else 404
    return 200


async def check(app: App, store: Store, client: httpx.AsyncClient, data: Stored) -> None:
    await wipe(store)
    await write(store, data)
    listed = await read_everything(Inspector(app), data)
    await assert_pages_render(client, data, listed)


NASTY: Final = Stored(
    queues={"default": [b"\xff\xfe", b"[1]", deep_text(990, "list").encode()]},
    odd_queue_names=[b"\xff", b"a/b", b"bad queue"],
    sets={"schedule": {b'{"jid": "s", "class": "x", "args": [1e999]}': float("inf")},
          "retry": {b'{"error_backtrace": [1, null, {"a": []}], "retry_count": true}': -1e308},
          "dead": {('{"jid": "d", "class": "x", "args": [' + deep_text(980, "dict")
                    + "]}").encode(): 1.0, b'{"failed_at": 1e300, "enqueued_at": NaN}': 2.0}},
    homes=("default", "other"),
)


@settings(max_examples=EXAMPLES)
@given(data=stored(entries(ANY_TEXT)))
@example(data=NASTY)
@example(data=Stored(queues={"default": [SURROGATE_ENTRY]}, odd_queue_names=[],
                     sets={"schedule": {}, "retry": {}, "dead": {SURROGATE_ENTRY: 1.0}}))
async def test_any_stored_entry_is_read_and_every_page_renders(
        app: App, store: Store, client: httpx.AsyncClient, data: Stored) -> None:
    await check(app, store, client, data)
