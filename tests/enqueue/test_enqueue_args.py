"""Enqueue arguments: what JSON carries faithfully reaches the job exactly as passed
(equal, and of the same types); anything else is refused at the call and nothing is
written to Redis.

The contract for values JSON would change on the way: refused, not converted. A tuple
would come back as a list, ``{1: "a"}`` as ``{"1": "a"}`` (and ``{1: "a", "1": "b"}``
would lose a key), an ``IntEnum`` as a plain int: the job would receive something other
than what the caller passed, found out only in the worker. So a tuple *inside* the
arguments is refused (the positional arguments themselves are a tuple only by Python's
calling convention and arrive as the job's ``*args``).
"""

from __future__ import annotations

import collections
import enum
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cogworker_async import App
from cogworker_async.redis.store import Store
from tests.hypothesis_profiles import examples
from tests.strategies import ANY_TEXT, BIG, MAX_INT_DIGITS, json_values
from tests.waiting import wait_until
from tests.workbench import SCAN_STEP, Bench, build_bench, wipe

RUN_EXAMPLES: Final = examples(25)
"""Round trips through a real worker: each starts one, so few."""
RUN_TIMEOUT: Final = 10.0
NOT_A_KEYWORD: Final = "self"
"""A keyword that ``enqueue``'s own first parameter once took: pinned by its own test."""

ARGS: Final = st.lists(json_values(ANY_TEXT), max_size=4)
KWARGS: Final = st.dictionaries(ANY_TEXT,
                                json_values(ANY_TEXT), max_size=4)


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    """A str subclass: JSON brings it back as a plain str."""


UNWRITABLE: Final = st.sampled_from([
    float("nan"), float("inf"), -float("inf"), {1, 2}, frozenset(), b"bytes", bytearray(b"x"),
    object(), 1j, Decimal("1.5"), {(1, 2): "tuple key"}, 10**MAX_INT_DIGITS, print,
])
"""Values JSON cannot write at all."""
UNFAITHFUL: Final = st.sampled_from([
    (1, 2), (), Colour.RED, Name("x"), collections.OrderedDict(a=1),
    collections.defaultdict(list), {"a": (1,)},
])
"""Values JSON would write, but bring back as something else (a list, an int, ...)."""
NON_STR_KEYS: Final = st.sampled_from([{1: "a"}, {1: "a", "1": "b"}, {1.5: 0}, {True: 0},
                                       {None: 0}, {"ok": {2: "nested"}}])
"""Dicts whose keys JSON would turn into strings (two keys may collapse into one)."""


@pytest.fixture
def bench(make_app: Callable[..., App]) -> Bench:
    return build_bench(make_app())


def same(sent: Any, received: Any) -> bool:
    """Equal and of the same types all the way down (``True == 1`` and ``-0.0 == 0.0``
    are not enough)."""
    if type(sent) is not type(received):
        return False
    if isinstance(sent, list):
        return len(sent) == len(received) and all(map(same, sent, received))
    if isinstance(sent, dict):
        return list(sent) == list(received) and all(same(sent[k], received[k]) for k in sent)
    if isinstance(sent, float):
        return math.copysign(1, sent) == math.copysign(1, received) and sent == received
    return bool(sent == received)


@settings(max_examples=RUN_EXAMPLES)
@given(args=ARGS, kwargs=KWARGS)
@example(args=[BIG, -BIG, 10**MAX_INT_DIGITS - 1, 5e-324, -0.0, 1.7976931348623157e308],
         kwargs={"": True, "args": None, "kwargs": [False]})
@example(args=["\ud800", {"\udfff": "a\udc80b"}, "é\u2028\x00"], kwargs={"\ud800": "x"})
async def test_json_arguments_reach_the_job_exactly(
        bench: Bench, store: Store, args: list[Any], kwargs: dict[str, Any]) -> None:
    await wipe(store)
    bench.received.clear()
    jid = await bench.record.enqueue(*args, **kwargs)
    async with bench.app.worker(concurrency=1):
        await wait_until(lambda: jid in bench.jids(), timeout=RUN_TIMEOUT)
    [run] = bench.received
    assert same(list(args), list(run.args))
    assert same(kwargs, run.kwargs)


@st.composite
def arguments_holding(draw: st.DrawFn, bad: st.SearchStrategy[Any],
                      ) -> tuple[list[Any], dict[str, Any]]:
    """JSON-ready args and kwargs with one ``bad`` value somewhere inside them."""
    value = draw(bad)
    for _ in range(draw(st.integers(0, 3))):  # buried in lists and dicts
        value = draw(st.sampled_from([[value], {"k": value}, [0, {"a": [value]}]]))
    args, kwargs = draw(ARGS), draw(KWARGS)
    if draw(st.booleans()):
        args.insert(draw(st.integers(0, len(args))), value)
    else:
        kwargs[draw(ANY_TEXT)] = value
    return args, kwargs


async def assert_refused_and_nothing_written(bench: Bench, store: Store, args: list[Any],
                                             kwargs: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        await bench.record.enqueue(*args, **kwargs)
    with pytest.raises((TypeError, ValueError)):
        await bench.record.enqueue_in(3600, *args, **kwargs)
    with pytest.raises((TypeError, ValueError)):
        await bench.record.enqueue_many([(args, kwargs)])
    # count: a SCAN step walks the whole keyspace of the session's server, which earlier
    # tests have filled; 10 keys a step made each example thousands of round trips (CI:
    # the test went past its 60 s timeout once the suite had grown).
    written = [key async for key in store.client.scan_iter(
        match=f"{store.keys.namespace}:*", count=SCAN_STEP)]
    assert written == []


@given(call=arguments_holding(UNWRITABLE))
async def test_values_json_cannot_write_are_refused_and_nothing_is_written(
        bench: Bench, store: Store, call: tuple[list[Any], dict[str, Any]]) -> None:
    await assert_refused_and_nothing_written(bench, store, *call)


@given(call=arguments_holding(UNFAITHFUL))
async def test_values_json_would_change_are_refused_and_nothing_is_written(
        bench: Bench, store: Store, call: tuple[list[Any], dict[str, Any]]) -> None:
    await assert_refused_and_nothing_written(bench, store, *call)


@given(call=arguments_holding(NON_STR_KEYS))
async def test_dict_keys_that_are_not_str_are_refused_and_nothing_is_written(
        bench: Bench, store: Store, call: tuple[list[Any], dict[str, Any]]) -> None:
    await assert_refused_and_nothing_written(bench, store, *call)


async def test_a_keyword_argument_named_self_reaches_the_job(bench: Bench) -> None:
    jid = await bench.record.enqueue(**{NOT_A_KEYWORD: 1})
    async with bench.app.worker(concurrency=1):
        await wait_until(lambda: jid in bench.jids(), timeout=RUN_TIMEOUT)
    assert bench.received[0].kwargs == {NOT_A_KEYWORD: 1}
