"""Tokens and query parameters are typed by people and by scripts: any text in them is
answered with a page, a 404, a 400 or a redirect, never a 500; and an action touches
only the entries its tokens name.

A token is ``<where>:<digest>``: the entry's score (sets) or position (queues) as it was
seen, and the first 16 hex digits of the SHA-1 of its bytes. It names an entry when
the digest is that entry's and the place is where the entry is (the same score, or a
position within ``QUEUE_FIND_WINDOW`` of it). Anything else names nothing.

Each queue has its own schedule, retry and dead set, and a token does not say which
queue's: the entries of each set are spread over two queues, so that a token is looked
for, and acted on, in the set that holds it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import quote

import httpx
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.admin.api import QUEUE_FIND_WINDOW
from cogworker_async.admin.records import digest
from cogworker_async.redis.store import SetName, Store
from cogworker_async.web import create_dashboard
from cogworker_async.web.security import CSRF_COOKIE
from tests.hypothesis_profiles import examples
from tests.strategies import ANY_TEXT, URL_TEXT
from tests.workbench import wipe

GET_EXAMPLES: Final = examples(60)
POST_EXAMPLES: Final = examples(40)
BASE_URL: Final = "http://dashboard.test"
KINDS: Final = ("scheduled", "retries", "dead")
SET_OF: Final = {"scheduled": "schedule", "retries": "retry", "dead": "dead"}
HOUR: Final = 3600.0
OTHER: Final = "other"
"""A second queue, whose sets hold one entry of each kind."""
ENTRIES_PER_PLACE: Final = 3
ODD_PLACES: Final = ("nan", "NaN", "inf", "-inf", "1e400", "-0.0", "0x10", " 1 ", "1_0", "١",
                     "", "-1", str(2**64), "9" * 5000, "1.0", "2", "None")


@dataclass(frozen=True, slots=True)
class Entry:
    """One job written for an example: where it is and its exact bytes."""

    place: str
    """A set (``schedule``, ``retry``, ``dead``) or ``queue``."""
    raw: bytes
    score: float | None
    position: int | None
    home: str = "default"
    """The queue whose list or set holds it."""

    def named_by(self, token: str) -> bool:
        """Does ``token`` name this entry (by the Inspector's rule)?"""
        where, _, hashed = token.rpartition(":")
        if hashed != digest(self.raw):
            return False
        try:
            if self.score is not None:
                return float(where) == self.score
            return 0 <= int(where) and abs(int(where) - (self.position or 0)) <= QUEUE_FIND_WINDOW
        except ValueError:
            return False


def entries(now: float) -> list[Entry]:
    """Three jobs in each kind of set (scores an hour apart: ahead of ``now`` in the
    schedule and retry sets, behind it in dead, which drops entries past
    ``dead_max_age``), the second in the set of queue ``OTHER``, the others in the
    default queue's; and three on the default queue."""
    made = []
    for place in ("schedule", "retry", "dead", "queue"):
        for i in range(ENTRIES_PER_PLACE):
            home = OTHER if place != "queue" and i == 1 else "default"
            raw = json.dumps({"jid": f"{place}-{i}", "class": "prop.ok", "args": [i],
                              "kwargs": {}, "queue": home, "retry": False,
                              "created_at": 1.0, "enqueued_at": 1.0}).encode()
            if place == "queue":  # pushed oldest first: position 0 runs next
                made.append(Entry(place, raw, None, i))
            else:
                step = -HOUR if place == "dead" else HOUR
                made.append(Entry(place, raw, float(round(now)) + (i + 1) * step, None, home))
    return made


ENTRIES: Final = entries(time.time())


def set_key(store: Store, entry: Entry) -> str:
    """The key of the set that holds ``entry`` (its queue's set of its kind)."""
    return store.zset_key(entry.home, cast(SetName, entry.place))


async def write(store: Store) -> None:
    for entry in ENTRIES:
        if entry.place == "queue":
            await store.client.rpush(store.keys.queue(entry.home), entry.raw)
        else:
            assert entry.score is not None
            await store.client.zadd(set_key(store, entry), {entry.raw: entry.score})
    await store.client.sadd(store.keys.queues, "default", OTHER)


async def still_there(store: Store, entry: Entry) -> bool:
    if entry.place == "queue":
        found = await store.client.lpos(store.keys.queue(entry.home), entry.raw.decode())
        return found is not None
    return await store.client.zscore(set_key(store, entry), entry.raw) is not None


def places(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(ODD_PLACES),
        st.floats().map(repr),
        st.integers(-5, 2 * QUEUE_FIND_WINDOW).map(str),
        st.sampled_from(ENTRIES).map(lambda e: repr(e.score) if e.score else str(e.position)),
        text,
    )


def digests(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(ENTRIES).map(lambda e: digest(e.raw)),
        st.text("0123456789abcdef", min_size=16, max_size=16),
        text,
    )


REAL_TOKENS: Final = st.sampled_from([
    f"{e.score!r}:{digest(e.raw)}" if e.score else f"{e.position}:{digest(e.raw)}"
    for e in ENTRIES])
"""The tokens a page lists for the entries."""


def tokens(text: st.SearchStrategy[str] = URL_TEXT) -> st.SearchStrategy[str]:
    """Token-shaped text (a place, a colon, a digest: each real, odd or arbitrary), real
    tokens, and any text at all."""
    shaped = st.builds(lambda w, h: f"{w}:{h}", places(text), digests(text))
    return st.one_of(shaped, REAL_TOKENS, text)


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    return make_app()


@pytest.fixture
async def client(app: App) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_dashboard(app))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        yield http


# -- GET -------------------------------------------------------------------------------


@settings(max_examples=GET_EXAMPLES)
@given(kind=st.sampled_from(KINDS), token=tokens())
@example(kind="dead", token="nan:0123456789abcdef")
@example(kind="retries", token="1e400:" + "0" * 16)
@example(kind="scheduled", token=":" * 20)
async def test_a_job_page_for_any_token_is_shown_or_a_404(
        app: App, store: Store, client: httpx.AsyncClient, kind: str, token: str) -> None:
    await wipe(store)
    await write(store)
    response = await client.get(f"/{kind}/job/{quote(token, safe='')}")
    named = [e for e in ENTRIES if e.place == SET_OF[kind] and e.named_by(token)]
    event("names an entry" if named else "names none")
    assert response.status_code == (200 if named else 404), (token, response.text[-1000:])


PARAMS: Final = st.dictionaries(
    st.sampled_from(["page", "q", "did", "done", "missing", "refused", "none", "size"]),
    URL_TEXT, max_size=4)


@settings(max_examples=GET_EXAMPLES)
@given(path=st.sampled_from(["/", "/queues", "/queues/default", "/busy", "/periodic",
                             "/scheduled", "/retries", "/dead", "/stats.json"]),
       params=PARAMS)
@example(path="/dead", params={"page": "9" * 5000, "q": "[*?\\"})
@example(path="/queues/default", params={"page": "-1e9"})
@example(path="/", params={"did": "retried", "done": "1" * 5000, "missing": "x"})
async def test_any_query_parameters_give_a_page(
        app: App, store: Store, client: httpx.AsyncClient, path: str,
        params: dict[str, str]) -> None:
    await wipe(store)
    await write(store)
    response = await client.get(path, params=params)
    assert response.status_code == 200, (path, params, response.text[-1000:])


@settings(max_examples=GET_EXAMPLES)
@given(name=URL_TEXT, params=PARAMS)
async def test_a_queue_page_for_any_name_is_shown_or_a_404(
        app: App, store: Store, client: httpx.AsyncClient, name: str,
        params: dict[str, str]) -> None:
    response = await client.get(f"/queues/{quote(name, safe='')}", params=params)
    assert response.status_code in (200, 307, 404), (name, response.text[-1000:])


# -- POST ------------------------------------------------------------------------------


async def csrf(client: httpx.AsyncClient) -> str:
    if CSRF_COOKIE not in client.cookies:
        assert (await client.get("/")).status_code == 200
    return client.cookies[CSRF_COOKIE]


ACTIONS: Final = [*(f"/{kind}/{verb}" for kind in KINDS for verb in ("retry", "delete", "kill")),
                  "/queues/default/delete"]


def place_of(action: str) -> str:
    kind = action.split("/")[1]
    return "queue" if kind == "queues" else SET_OF[kind]


@settings(max_examples=POST_EXAMPLES)
@given(action=st.sampled_from(ACTIONS),
       chosen=st.lists(st.one_of(REAL_TOKENS, tokens()), max_size=4),
       kept=st.fixed_dictionaries({}, optional={"page": URL_TEXT, "q": URL_TEXT}))
@example(action="/dead/delete", chosen=[f"{ENTRIES[8].score}:{digest(ENTRIES[8].raw)}", "nan:x"],
         kept={})
@example(action="/retries/retry", chosen=[f"{int(ENTRIES[4].score or 0)}:{digest(ENTRIES[4].raw)}"],
         kept={"page": "2", "q": "&x=1#"})
@example(action="/queues/default/delete", chosen=[f"{2**64}:{'0' * 16}"], kept={})
@example(action="/dead/delete", chosen=[f"{ENTRIES[7].score}:{digest(ENTRIES[7].raw)}"], kept={})
async def test_an_action_touches_only_the_entries_its_tokens_name(
        app: App, store: Store, client: httpx.AsyncClient, action: str, chosen: list[str],
        kept: dict[str, str]) -> None:
    await wipe(store)
    await write(store)
    form = {"csrf_token": await csrf(client), "token": chosen, **kept}
    response = await client.post(action, data=form)
    assert response.status_code in (303, 400), (action, chosen, response.text[-1000:])
    place = place_of(action)
    event(f"{response.status_code}")
    for entry in ENTRIES:
        named = entry.place == place and any(entry.named_by(token) for token in chosen)
        if response.status_code == 400 or not named:
            assert await still_there(store, entry), (entry, chosen)
        elif action.endswith("/delete"):
            event("a named entry deleted")
            assert not await still_there(store, entry), (entry, chosen)


# -- the admin model, as the CLI calls it ------------------------------------------------


@given(token=tokens(ANY_TEXT), kind=st.sampled_from(KINDS))
async def test_find_answers_an_entry_none_or_value_error_for_any_token(
        app: App, store: Store, token: str, kind: str) -> None:
    """The admin CLI hands the Inspector what was typed (argv may hold lone surrogates:
    bytes that are not UTF-8, decoded with ``surrogateescape``)."""
    inspector = Inspector(app)
    try:
        found = await inspector.job_set(kind).find(token)
        await inspector.queue("default").find(token)
    except ValueError:
        return
    assert found is None or any(e.named_by(token) for e in ENTRIES)


@given(term=ANY_TEXT, kind=st.sampled_from(KINDS))
@example(term="\udcff", kind="dead")
@example(term="[*?\\^-]", kind="retries")
async def test_search_answers_matches_or_value_error_for_any_term(
        app: App, store: Store, term: str, kind: str) -> None:
    """A ValueError is what the CLI reports as bad usage (exit 2). A term holding a lone
    surrogate cannot be sent to Redis: a UnicodeEncodeError, which is a ValueError."""
    await wipe(store)
    await write(store)
    try:
        found = await Inspector(app).job_set(kind).search(term)
    except ValueError:
        return
    assert found.complete
    assert all(e.raw in {f.raw for f in found.items} for e in ENTRIES
               if e.place == SET_OF[kind] and term.strip().lower() in e.raw.decode().lower()
               and term.strip().isascii())
