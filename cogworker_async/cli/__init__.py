"""The command line: ``cogworker-async run app:jobs``, ``web`` and the admin commands.

``run`` works until SIGTERM or SIGINT, then shuts down gracefully. A second signal stops
at once: running jobs are cancelled and given back. A Redis that is not up yet when the
worker starts (compose or Kubernetes start it second) is waited for, up to
``--wait-for-redis`` seconds (default 30), said once; a wrong password or a missing
permission is no reason to wait and ends the command at once.

Errors reach a person as one ``error: ...`` line on stderr, never a traceback, with the
password of any Redis URL masked (``urls.mask``). Exit codes, for every command:

    0  done; ``run``: stopped cleanly (SIGTERM/SIGINT: jobs finished or were given back)
    1  ``run``: stopped hard by a second signal (running jobs cancelled, given back);
       admin commands: some named entry was gone or refused
    2  usage or configuration error: a bad option or setting, an App module that fails
       to import, a target that is not an App, an unsupported Redis URL, a server too
       old for reliable fetch
    3  Redis unreachable or refusing: connection refused or timed out (after
       ``--wait-for-redis``), a wrong password, a user lacking a permission (NOPERM)
    4  ``run`` under ``--processes``: stopped after ``--max-jobs`` (replace me);
       ``job``: unknown jid

The translation lives in two places: ``run`` knows its URL and says which server failed;
``main`` is the boundary for everything else that escapes a command (the admin
commands, registered from ``cli/admin.py`` and its siblings, included).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, Final, NoReturn, cast

import anyio
import typer

from cogworker_async import environment, logs, urls
from cogworker_async.app import App, Worker
from cogworker_async.cli import admin as admin_commands
from cogworker_async.cli import job as job_command
from cogworker_async.cli import metrics as metrics_commands
from cogworker_async.cli import migrate as migrate_command
from cogworker_async.cli import supervisor as supervising
from cogworker_async.errors import CogworkerError, why
from cogworker_async.redis.connection import connect, server_info
from cogworker_async.redis.errors import REFUSING, UNREACHABLE, NoPermissionError, RedisError
from cogworker_async.settings import Settings
from cogworker_async.version import __version__
from cogworker_async.worker import stopper
from cogworker_async.worker.manager import Manager

log = logging.getLogger(__name__)

EXIT_OK: Final = 0
EXIT_HARD_STOP: Final = 1
EXIT_USAGE: Final = 2
EXIT_REDIS: Final = 3

THREAD_EXIT_GRACE: Final = 1.0
"""Seconds idle job threads get to end at exit before the CLI stops waiting for them."""
MAX_PORT: Final = 65535
"""The highest TCP port (``--metrics-port`` under ``--processes``: PORT + N - 1)."""
WAIT_FOR_REDIS: Final = 30.0
"""Default seconds ``run`` waits at start for a Redis that is not reachable yet."""
REDIS_RETRY_PAUSE: Final = (0.1, 2.0)
"""First and longest pause (seconds) between tries to reach Redis at start (doubling)."""

cli = typer.Typer(
    name="cogworker-async",
    help="An asyncio-native background job worker on Redis.",
    no_args_is_help=True,
    add_completion=False,
)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def load_app(target: str) -> App:
    """``"package.module:attribute"`` -> the App it names (from the current directory).

    Any failure is a ``typer.BadParameter`` in one line: the module's own exception
    (whatever it is: a module that raises on import is a configuration error) and where
    it was raised."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise typer.BadParameter(f"{target!r}: expected MODULE:ATTRIBUTE, e.g. app:jobs")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise typer.BadParameter(
            f"cannot import {module_name!r}: {why(exc)}{_raised_at(exc)} "
            f"(python -c 'import {module_name}' shows the traceback)") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        found = "nothing" if app is None else f"an object of type {type(app).__name__}"
        raise typer.BadParameter(f"{target!r} is not a cogworker_async.App (found {found})")
    return app


def _raised_at(exc: BaseException) -> str:
    """`` (at path:line)`` of the user's code that raised ``exc``; "" when it was the
    import machinery (a module that does not exist)."""
    machinery = os.path.dirname(importlib.__file__) + os.sep
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(("<frozen", machinery)) and f.filename != __file__]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


# -- errors: which exit code, in which words ---------------------------------------------


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside task-group exception groups (or ``exc`` itself)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def explain(exc: BaseException, url: str | None = None) -> tuple[int, str] | None:
    """``(exit code, message)`` for an error a person can act on; None for a bug."""
    where = f"Redis at {urls.mask(url)}" if url else "Redis"
    for leaf in _leaves(exc):
        if isinstance(leaf, NoPermissionError):
            return EXIT_REDIS, (f"{where}: the user lacks a permission the worker needs "
                                f"({why(leaf)}); grant it (ACL SETUSER) or use another user")
        if isinstance(leaf, REFUSING):
            return EXIT_REDIS, (f"{where} refused this client ({why(leaf)}); check the "
                                "user name and password in the Redis URL")
        if isinstance(leaf, UNREACHABLE):
            return EXIT_REDIS, (f"cannot reach {where} ({why(leaf)}); is it running, and "
                                "is the URL right?")
        if isinstance(leaf, RedisError):
            return EXIT_REDIS, f"{where} refused: {why(leaf)}"
        if isinstance(leaf, CogworkerError):
            return EXIT_USAGE, str(leaf)
    return None


class NotReachable(Exception):
    """Redis did not answer within ``--wait-for-redis`` seconds."""


# -- run -----------------------------------------------------------------------------------


async def _watch_signals(manager: Worker, signals: AsyncIterator[int]) -> None:
    async for signum in signals:
        if not manager.stopping:
            log.info("%s: stopping (jobs get %.0fs; signal again to stop at once)",
                     signal.Signals(signum).name, manager.settings.shutdown_timeout)
            manager.stop()
        else:
            log.warning("%s again: stopping now", signal.Signals(signum).name)
            manager.hard_stop()


async def _probe(url: str) -> None:
    """Ask Redis what the worker asks first (INFO): reachable, let in, permitted."""
    client = connect(url)
    try:
        await server_info(client)
    finally:
        with anyio.CancelScope(shield=True):
            await client.aclose()


async def _reach_redis(url: str, bound: float) -> None:
    """Return once Redis answers. Not reachable: try again (backing off) for up to
    ``bound`` seconds, saying so once, then ``NotReachable``. Refusing (a wrong password,
    NOPERM): raised at once — waiting would not change the answer."""
    began = anyio.current_time()
    pause = REDIS_RETRY_PAUSE[0]
    while True:
        left = began + bound - anyio.current_time()
        try:
            with anyio.fail_after(max(left, REDIS_RETRY_PAUSE[0])):
                await _probe(url)
        except REFUSING:
            raise
        except UNREACHABLE as exc:  # fail_after's TimeoutError is an OSError
            left = began + bound - anyio.current_time()
            if left <= 0:
                raise NotReachable(f"cannot reach Redis at {urls.mask(url)} ({why(exc)}), "
                                   f"waited {bound:g}s; is it running, and is the URL "
                                   "right? (--wait-for-redis sets how long to wait)") from exc
            if pause == REDIS_RETRY_PAUSE[0]:
                log.warning("Redis at %s is not reachable yet (%s); waiting up to %gs",
                            urls.mask(url), why(exc), bound)
            await anyio.sleep(min(pause, left))
            pause = min(pause * 2, REDIS_RETRY_PAUSE[1])
            continue
        if pause != REDIS_RETRY_PAUSE[0]:
            log.info("Redis at %s is up (after %.1fs)", urls.mask(url),
                     anyio.current_time() - began)
        return


async def _until_reachable(url: str, bound: float, signals: AsyncIterator[int]) -> bool:
    """``_reach_redis``, unless a signal comes first: then False (a clean stop)."""
    stopped = False
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            nonlocal stopped
            async for signum in signals:
                log.info("%s: stopping before the worker started",
                         signal.Signals(signum).name)
                stopped = True
                tg.cancel_scope.cancel()
                return

        tg.start_soon(stop_on_signal)
        await _reach_redis(url, bound)
        tg.cancel_scope.cancel()
    return not stopped


async def _serve(app: App, overrides: dict[str, Any], url: str, wait_for: float,
                 burst: bool = False) -> int:
    """Run a worker until a signal stops it (or, ``burst``, its work is done, or it has
    fetched ``max_jobs``); the exit code: 0 graceful, 1 hard, 4 (``EXIT_RECYCLE``) after
    ``max_jobs`` under a supervisor (which then starts a fresh process)."""
    # The handlers go in before the worker starts (and before Redis is waited for): a
    # SIGTERM while the worker starts waits in the receiver and stops it as soon as it
    # runs, rather than killing the process with fetched jobs in progress.
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            if not await _until_reachable(url, wait_for, signals):
                return EXIT_OK
            async with app.worker(**overrides) as manager, anyio.create_task_group() as tg:
                _say_ready()
                tg.start_soon(_watch_signals, manager, signals)
                if burst:
                    tg.start_soon(stopper.stop_when_drained, cast(Manager, manager))
                await manager.wait_stopped()
                tg.cancel_scope.cancel()
            if manager.stopped_hard:
                return EXIT_HARD_STOP
            spent = cast(Manager, manager).budget_spent
            return supervising.EXIT_RECYCLE if spent and environment.supervisor() else EXIT_OK
    finally:
        with anyio.CancelScope(shield=True):
            await app.close()


def _say_ready() -> None:
    """Under a supervisor: tell it that this worker has started (its ready pipe). An
    exit before this is "could not start" (the supervisor stops); one after it is a
    crash (the supervisor starts another)."""
    fd = environment.take_ready_fd()
    if fd is None:
        return
    try:
        os.write(fd, b"1")
        os.close(fd)
    except OSError:  # the supervisor is gone: PDEATHSIG stops this process
        pass


def _log_level(text: str) -> int:
    level = logging.getLevelName(text.upper())
    if not isinstance(level, int):
        fail(f"unknown log level {text!r}: use DEBUG, INFO, WARNING or ERROR")
    return level


def _settings(app: App, overrides: dict[str, Any]) -> Settings:
    """The worker's settings, checked before anything starts (a concurrency of 10**9 is
    refused here, before a slot is made)."""
    try:
        return dataclasses.replace(app.settings, **overrides)
    except (ValueError, TypeError) as exc:
        fail(f"invalid settings: {exc}")


def _redis_url(app: App, settings: Settings) -> str:
    """The URL the worker will use, checked (an unsupported one is named, masked)."""
    configured = settings.redis_url or environment.redis_url()
    try:
        if configured:
            return urls.check(configured)
        return app.redis_url()  # the embedded server, started now
    except CogworkerError as exc:
        fail(str(exc))


@cli.command()
def run(
    target: Annotated[str, typer.Argument(help="The App to run, as MODULE:ATTRIBUTE.")],
    concurrency: Annotated[int | None, typer.Option(help="Jobs run at once.")] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", "-q", help="Queue to work (repeatable, in order)."),
    ] = None,
    redis_url: Annotated[str | None, typer.Option(help="Redis URL (else the App's).")] = None,
    wait_for_redis: Annotated[float, typer.Option(
        min=0.0, help="Seconds to wait at start for a Redis that is not up yet.")]
    = WAIT_FOR_REDIS,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR.")] = "INFO",
    log_format: Annotated[str, typer.Option(
        help="text, or json: one object per line, with jid/job/queue/attempt in a job.")]
    = "text",
    metrics_port: Annotated[int | None, typer.Option(
        help="Serve Prometheus metrics on this port (the metrics extra).")] = None,
    metrics_host: Annotated[str | None, typer.Option(
        help="Address for --metrics-port (default loopback).")] = None,
    processes: Annotated[str | None, typer.Option(
        help="Run N worker processes (or 'auto': one per usable core) under a supervisor "
             "that restarts them; with --metrics-port, process i serves on PORT+i.")]
    = None,
    max_memory: Annotated[str | None, typer.Option(
        help="With --processes: restart a worker gracefully past this resident memory "
             "(e.g. 512M, 2G).")] = None,
    max_jobs: Annotated[int | None, typer.Option(
        min=1, help="Stop gracefully after this many jobs (under --processes: a fresh "
                    "process replaces it).")] = None,
    burst: Annotated[bool, typer.Option(
        "--burst", help="Exit 0 once the queues and their due scheduled and retry jobs "
                        "are empty.")] = False,
    reload: Annotated[bool, typer.Option(
        "--reload", help="Development: restart the worker(s) when a .py file under the "
                         "current directory changes (the reload extra).")] = False,
) -> None:
    """Work jobs until SIGTERM/SIGINT, then shut down gracefully."""
    try:
        logs.configure(_log_level(log_level), log_format)
    except ValueError as exc:
        fail(str(exc))
    supervisor, given_url = environment.claim_child()
    if supervisor is not None:  # a child of ``run --processes``: it goes with its parent
        supervising.die_with(supervisor)
        if (fd := environment.ready_fd()) is not None:
            _keep_to_self(fd)
        redis_url = redis_url or given_url
    try:
        app = load_app(target)
    except typer.BadParameter as exc:
        fail(exc.message)
    overrides = _overrides(concurrency=concurrency, queue=queue, redis_url=redis_url,
                           metrics_port=metrics_port, metrics_host=metrics_host,
                           max_jobs=max_jobs)
    url = _redis_url(app, _settings(app, overrides))
    if redis_url:
        overrides["redis_url"] = url
    if processes is not None or max_memory is not None or reload:
        shared = _child_options(concurrency=concurrency, queue=queue,
                                wait_for_redis=wait_for_redis, log_level=log_level,
                                log_format=log_format, metrics_host=metrics_host,
                                max_jobs=max_jobs, burst=burst)
        settings = _settings(app, overrides)
        code = _supervise(target, shared, url, processes=processes, max_memory=max_memory,
                          metrics_port=settings.metrics_port, burst=burst, reload=reload,
                          shutdown_timeout=settings.shutdown_timeout)
        anyio.run(app.close)  # the embedded server, if this process started it
        raise typer.Exit(code)
    try:
        # uvloop (the ``speed`` extra) when installed: a good share less CPU per job.
        uvloop = importlib.util.find_spec("uvloop") is not None
        code = anyio.run(_serve, app, overrides, url, wait_for_redis, burst,
                         backend_options={"use_uvloop": uvloop})
    except Exception as exc:
        _fail_run(exc, url)
    _leave_abandoned_threads(code)
    raise typer.Exit(code)


def _keep_to_self(fd: int) -> None:
    """The ready pipe is this process's: not a subprocess's a job starts."""
    try:
        os.set_inheritable(fd, False)
    except OSError:  # not open after all: nothing to say ready on
        pass


def _overrides(*, concurrency: int | None, queue: list[str] | None, redis_url: str | None,
               metrics_port: int | None, metrics_host: str | None,
               max_jobs: int | None) -> dict[str, Any]:
    """The App settings ``run``'s options override."""
    given = {"concurrency": concurrency, "redis_url": redis_url or None,
             "max_jobs": max_jobs,
             "metrics_port": metrics_port, "metrics_host": metrics_host,
             # [""] too: a named queue that cannot be one is refused, not ignored
             "queues": tuple(queue) if queue else None}
    return {name: value for name, value in given.items() if value is not None}


def _supervise(target: str, shared: list[str], url: str, *, processes: str | None,
               max_memory: str | None, metrics_port: int | None, burst: bool,
               reload: bool, shutdown_timeout: float) -> int:
    """``run --processes``: supervise the children until they have all exited."""
    try:
        count = supervising.parse_processes(processes) if processes is not None else 1
        memory = supervising.parse_size(max_memory) if max_memory is not None else None
    except ValueError as exc:
        fail(str(exc))
    # Worker i serves on PORT + i: the whole range is checked now, not when the child
    # past 65535 fails to start after the others did.
    if metrics_port is not None and metrics_port + count - 1 > MAX_PORT:
        fail(f"--metrics-port {metrics_port} (or the App's metrics_port) with --processes "
             f"{count}: worker i serves on PORT+i, and {metrics_port}+{count - 1} is past "
             f"{MAX_PORT}; use a port of at most {MAX_PORT - count + 1}")
    if reload and importlib.util.find_spec("watchfiles") is None:
        fail("--reload needs watchfiles: pip install 'cogworker-async[reload]'")

    def argv_of(number: int) -> list[str]:
        port = [] if metrics_port is None else ["--metrics-port", str(metrics_port + number)]
        return supervising.child_argv(target, [*shared, *port])

    return supervising.Supervisor(argv_of, count, max_memory=memory, burst=burst,
                                  memory_grace=supervising.memory_grace(shutdown_timeout),
                                  reload_root=Path.cwd() if reload else None,
                                  env={environment.CHILD_REDIS_URL: url}).run()


def _child_options(*, concurrency: int | None, queue: list[str] | None,
                   wait_for_redis: float, log_level: str, log_format: str,
                   metrics_host: str | None, max_jobs: int | None, burst: bool) -> list[str]:
    """The ``run`` options every child of a supervisor gets: the parent's. The URL it
    resolved (an embedded server it started is the children's too) goes in their
    environment instead (``_supervise``): a command line is visible to every user."""
    options = ["--wait-for-redis", repr(wait_for_redis),
               "--log-level", log_level, "--log-format", log_format]
    if concurrency is not None:
        options += ["--concurrency", str(concurrency)]
    for name in queue or ():
        options += ["--queue", name]
    if metrics_host is not None:
        options += ["--metrics-host", metrics_host]
    if max_jobs is not None:
        options += ["--max-jobs", str(max_jobs)]
    if burst:
        options.append("--burst")
    return options


def _fail_run(exc: Exception, url: str) -> NoReturn:
    for leaf in _leaves(exc):
        if isinstance(leaf, NotReachable):
            fail(str(leaf), EXIT_REDIS)
    explained = explain(exc, url)
    if explained is None:
        raise exc
    code, message = explained
    fail(message, code)


def _leave_abandoned_threads(status: int) -> None:
    """Exit now if a plain-function job's thread still runs after the worker stopped.

    Such a thread was abandoned at the shutdown deadline and its job given back (see
    ``Executor._call`` in ``worker/execute.py``); a normal exit would join it, holding
    the process for as long as the function runs, past ``shutdown_timeout`` and past a
    second signal. Idle
    threads get ``THREAD_EXIT_GRACE`` to end first.
    """
    deadline = time.monotonic() + THREAD_EXIT_GRACE
    for thread in _other_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    lingering = _other_threads()
    if not lingering:
        return
    log.warning("exiting with %d thread(s) still running (plain jobs, whose jobs were "
                "given back, or plain hooks abandoned at their timeout)", len(lingering))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _other_threads() -> list[threading.Thread]:
    current = threading.current_thread()
    return [t for t in threading.enumerate()
            if t is not current and not t.daemon and t.is_alive()]


@cli.command()
def web(
    target: Annotated[str, typer.Argument(help="The App to show, as MODULE:ATTRIBUTE.")],
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless told).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR.")] = "INFO",
) -> None:
    """Serve the web dashboard (needs the ``web`` extra) until SIGTERM/SIGINT."""
    try:
        from cogworker_async.web import serve
    except ImportError as exc:
        typer.echo(f"error: the dashboard needs the web extra "
                   f"(pip install 'cogworker-async[web]'): {exc}", err=True)
        raise typer.Exit(2) from None
    app = load_app(target)
    try:
        serve(app, host=host, port=port, log_level=log_level.lower())
    except CogworkerError as exc:  # e.g. a malformed $COGWORKER_WEB_AUTH: refuse to
        # serve at all rather than serve without the protection that was asked for
        fail(str(exc), EXIT_USAGE)


admin_commands.register(cli, load_app)  # stats, queues, scheduled, retries, dead, ...
migrate_command.register(cli, load_app)  # migrate-keys (from the 0.1 key layout)
metrics_commands.register(cli, load_app)  # metrics-summary (runs per job class)
job_command.register(cli, load_app)  # job JID [--cancel]: one job's status record
metrics_commands.register_exporter(cli, load_app)  # metrics: the system-wide gauges


@cli.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def main() -> None:
    """The ``cogworker-async`` entry point, and the one boundary for errors that escape
    a command: a Redis or configuration error is one line and its exit code (see the
    module docstring); anything else is a bug and keeps its traceback."""
    try:
        cli()
    except Exception as exc:
        explained = explain(exc)
        if explained is None:
            raise
        code, message = explained
        typer.echo(f"error: {message}", err=True)
        sys.exit(code)
