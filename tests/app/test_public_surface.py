"""The public surface: every type a public signature names can be imported from
``cogworker_async``, every name ``__all__`` promises imports, and the App's namespaces
(``jobs.batches``, ``jobs.queues``) do on a real Redis what their older spellings do.

The walk reads each public method and property of the App and of what it hands out
(the job handles, the worker, a batch, a chain, a signature, a job's context, the two
namespaces): with ``typing.get_type_hints`` for the classes a signature holds (an alias
is expanded, so ``ClientMiddleware`` shows ``Enqueue`` and ``JobContext``), and in the
annotation's own text for the aliases it names (``GroupKey``, ``UniquePolicy``...). A
type a user meets in a signature but cannot import is one they cannot annotate with.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

import pytest

import cogworker_async
from cogworker_async import (
    App,
    AppBatches,
    AppQueues,
    Batch,
    Chain,
    ConfigurationError,
    Enqueuer,
    JobContext,
    JobFunction,
    Signature,
    Worker,
)
from tests.waiting import wait_until

WAIT: Final = 15.0
NOWHERE: Final = "redis://127.0.0.1:1/0"
"""No server: building an App reaches none."""
OURS: Final = "cogworker_async"

HANDED_OUT: Final = (JobFunction, Enqueuer, Worker, Batch, Chain, Signature, JobContext,
                     AppBatches, AppQueues)
"""What the App hands out. Their constructors are left out of the walk: the App builds
them (a user never calls ``JobFunction(client, definition)``); the App's own is in."""


def _functions(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """``cls``'s public methods and properties (and ``__init__`` for the App), as functions."""
    for name in dir(cls):
        if name.startswith("_") and not (cls is App and name == "__init__"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, property) and raw.fget is not None:
            yield name, raw.fget
        elif isinstance(raw, cached_property):
            yield name, raw.func
        elif isinstance(raw, staticmethod | classmethod):
            yield name, raw.__func__
        elif inspect.isfunction(raw):
            yield name, raw


DEPRECATED_INTERNALS = frozenset({"App.store"})
"""Kept only as aliases that warn (the internal ``App._store``): not public surface."""


def _signatures() -> Iterator[tuple[str, Callable[..., Any]]]:
    for cls in (App, *HANDED_OUT):
        for name, function in _functions(cls):
            if f"{cls.__name__}.{name}" not in DEPRECATED_INTERNALS:
                yield f"{cls.__name__}.{name}", function


def _exports() -> dict[str, object]:
    return {name: getattr(cogworker_async, name) for name in cogworker_async.__all__}


def _classes_in(hint: object) -> Iterator[type]:
    """The classes a resolved hint holds, at any depth (``dict[str, Pause]``, unions,
    ``Callable[[Enqueue, ...], ...]``)."""
    if isinstance(hint, list | tuple):
        for arg in hint:
            yield from _classes_in(arg)
        return
    args = typing.get_args(hint)
    if args:
        for arg in args:
            yield from _classes_in(arg)
        yield from _classes_in(typing.get_origin(hint))
    elif isinstance(hint, type):
        yield hint


@cache
def _imported_from(module: str) -> dict[str, tuple[str, str]]:
    """local name -> (module, name) for every ``from X import Y`` of ``module`` (those
    under ``TYPE_CHECKING`` too), and (module, name) for what it defines itself."""
    tree = ast.parse(Path(sys.modules[module].__file__ or "").read_text())
    found: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = (node.module, alias.name)
    for node in tree.body:  # defined here: a class, or an alias assigned at module level
        targets = ([node.name] if isinstance(node, ast.ClassDef) else
                   [t.id for t in node.targets if isinstance(t, ast.Name)]
                   if isinstance(node, ast.Assign) else
                   [node.target.id] if isinstance(node, ast.AnnAssign)
                   and isinstance(node.target, ast.Name) else [])
        found.update({name: (module, name) for name in targets})
    return found


def _named_types(annotated: Callable[..., Any] | type) -> Iterator[tuple[str, object]]:
    """(name, object) for each of the package's types or aliases the annotations of
    ``annotated`` (a function, or a TypedDict of keywords) spell out by name (type
    variables left out: nothing to import)."""
    for text in annotated.__annotations__.values():
        if not isinstance(text, str):
            continue
        for node in ast.walk(ast.parse(text, mode="eval")):
            if not isinstance(node, ast.Name):
                continue
            source = _imported_from(annotated.__module__).get(node.id)
            if source is None or not source[0].startswith(OURS):
                continue
            found = getattr(importlib.import_module(source[0]), source[1])
            if not isinstance(found, TypeVar | ParamSpec):
                yield node.id, found


def test_the_walk_sees_the_signatures() -> None:
    """The checks below hold vacuously if the walk finds nothing: it finds these."""
    walked = dict(_signatures())
    assert {"App.__init__", "App.batches", "App.queues", "App.job", "App.paused",
            "AppBatches.open", "JobFunction.enqueue", "Worker.stop"} <= walked.keys()
    assert "Pause" in dict(_named_types(walked["App.paused"]))
    assert "FailureHook" in dict(_named_types(walked["App.on_failure"]))


def _unexported(annotated: Callable[..., Any] | type) -> Iterator[str]:
    """The names of the package's types ``annotated``'s annotations use that are not
    exported; the fields of a TypedDict of keywords (``**kw: Unpack[...]``) too."""
    exports = _exports()
    module = vars(sys.modules[annotated.__module__])
    try:  # the names only TYPE_CHECKING imports must resolve from the exports
        hints = typing.get_type_hints(annotated, globalns={**exports, **module})
    except NameError as exc:
        yield str(exc)
        return
    for cls in _classes_in(list(hints.values())):
        if cls.__module__.startswith(OURS) and exports.get(cls.__name__) is not cls:
            yield cls.__name__
        if typing.is_typeddict(cls):
            yield from _unexported(cls)
    for name, found in _named_types(annotated):
        if exports.get(name) is not found:
            yield name


def test_every_type_in_a_public_signature_is_exported() -> None:
    missing: dict[str, set[str]] = {}
    for where, function in _signatures():
        for name in _unexported(function):
            missing.setdefault(name, set()).add(where)
    assert not missing, f"not importable from cogworker_async: {missing}"


def test_every_name_in_all_imports() -> None:
    for name in cogworker_async.__all__:
        namespace: dict[str, object] = {}
        exec(f"from cogworker_async import {name}", namespace)
        assert namespace[name] is getattr(cogworker_async, name)
    assert len(set(cogworker_async.__all__)) == len(cogworker_async.__all__)


def test_the_internals_are_private() -> None:
    """``App.store`` is the internal ``App._store``'s deprecated alias (it warns:
    tests/enqueue/test_group_limit_override.py), for callers from before issue 42."""
    assert "deprecated" in (App.store.__doc__ or "").lower()
    assert not hasattr(App, "batch_backend")


# -- the namespaces, against a real Redis -------------------------------------------------


async def test_a_batch_opened_through_the_namespace_runs_and_ends_in_success(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app(track_jobs=True)
    succeeded: list[str | None] = []

    @jobs.job(name="double", keep_result=60)
    async def double(n: int) -> int:
        return n * 2

    @jobs.job(name="report")
    async def report() -> None:
        succeeded.append(cogworker_async.current_job().batch_id)

    async with jobs.worker():
        async with jobs.batches.open("two", on_success=report.s()) as batch:
            first, second = await double.enqueue(1), await double.enqueue(2)
        await wait_until(lambda: succeeded == [batch.bid], timeout=WAIT)
        status = await jobs.batches.status(batch.bid)
        assert (status.state, status.total, status.succeeded) == ("success", 2, 2)
        assert await jobs.batch_status(batch.bid) == status  # the older name
        assert await jobs.batches.results(batch.bid) == {first: 2, second: 4}
        assert await jobs.batch_results(batch.bid) == {first: 2, second: 4}


async def test_cancelling_a_batch_through_the_namespace_cancels_its_waiting_members(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app(track_jobs=True)

    @jobs.job(name="later")
    async def later() -> None: ...

    async with jobs.batches.open("cancelled") as batch:
        jid = await later.enqueue_in(3600)
    async with jobs.batch("cancelled too") as other:  # the older name opens one too
        other_jid = await later.enqueue_in(3600)

    assert await jobs.batches.cancel(batch.bid) == 1
    assert await jobs.cancel_batch(other.bid) == 1
    assert jid is not None
    assert other_jid is not None
    assert (await jobs.status(jid)).state == "cancelled"
    assert (await jobs.status(other_jid)).state == "cancelled"


def test_a_batch_needs_job_records_in_the_namespace_too() -> None:
    jobs = App(NOWHERE, track_jobs=False)
    with pytest.raises(ConfigurationError, match="track_jobs=False"):
        jobs.batches.open()
    with pytest.raises(ConfigurationError, match="track_jobs=False"):
        jobs.batch()


async def test_a_queue_paused_through_the_namespace_holds_its_job_until_resumed(
    make_app: Callable[..., App],
) -> None:
    # One slot, the held queue listed first: unpaused, its job would run before the
    # marker enqueued after it.
    jobs = make_app(queues=["held", "default"], concurrency=1)
    ran: list[str] = []

    @jobs.job(name="job")
    async def job(tag: str) -> None:
        ran.append(tag)

    assert await jobs.queues.pause("held")
    assert not await jobs.pause("held")  # the older name sees the same flag
    assert list(await jobs.queues.paused()) == ["held"]
    assert list(await jobs.paused(["held", "default"])) == ["held"]
    held = await job.options(queue="held").enqueue("held")
    await job.enqueue("marker")
    assert held is not None
    async with jobs.worker():
        await wait_until(lambda: "marker" in ran, timeout=WAIT)
        assert ran == ["marker"]
        assert (await jobs.status(held)).state == "queued"
        assert await jobs.queues.resume("held")
        await wait_until(lambda: "held" in ran, timeout=WAIT)
    assert not await jobs.resume("held")  # resumed already, by the namespace
    assert await jobs.queues.paused() == {}


def test_the_namespaces_are_one_object_per_app() -> None:
    jobs = App(NOWHERE)
    assert jobs.batches is jobs.batches
    assert jobs.queues is jobs.queues
    assert App(NOWHERE).batches is not jobs.batches
