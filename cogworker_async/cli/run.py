"""``cogworker-async run app:jobs``: work jobs until SIGTERM or SIGINT, then shut down
gracefully.

A second signal stops at once: running jobs are cancelled and given back. A Redis that
is not up yet when the worker starts (compose or Kubernetes start it second) is waited
for, up to ``--wait-for-redis`` seconds (default 30), said once; a wrong password or a
missing permission is no reason to wait and ends the command at once. ``--processes``,
``--max-memory`` and ``--reload`` hand the work to a supervisor (``cli/supervisor.py``)
that runs this same command in each child.

``run`` knows its URL, so it translates its own errors (``_fail_run``, with
``exits.explain``) and says which server failed; the exit codes are in
``cli/__init__.py``'s docstring.

Registered by ``cli/__init__.py`` as its siblings are (``register``): it gets
``load_app`` from there, rather than importing the package that imports it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn, cast

import anyio
import typer

from cogworker_async import environment, logs
from cogworker_async.app import App
from cogworker_async.cli import starting
from cogworker_async.cli import supervisor as supervising
from cogworker_async.cli.exits import (
    EXIT_HARD_STOP,
    EXIT_LIFESPAN,
    EXIT_OK,
    EXIT_REDIS,
    explain,
    fail,
    leaves,
)
from cogworker_async.errors import CogworkerError, LifespanExitFailed, install_extra, why
from cogworker_async.redis import urls
from cogworker_async.redis.connection import connect, server_info
from cogworker_async.redis.errors import REFUSING, UNREACHABLE
from cogworker_async.settings import Settings
from cogworker_async.worker import stopper
from cogworker_async.worker.manager import Manager

if TYPE_CHECKING:
    from cogworker_async.cli.common import LoadApp  # which imports the admin model

# The name the worker's own lines had before ``run`` left ``cli/__init__.py``: a log
# filter or an alert on "cogworker_async.cli" keeps matching them.
log = logging.getLogger("cogworker_async.cli")

THREAD_EXIT_GRACE: Final = 1.0
"""Seconds idle job threads get to end at exit before the CLI stops waiting for them."""
MAX_PORT: Final = 65535
"""The highest TCP port (``--metrics-port`` under ``--processes``: PORT + N - 1)."""
WAIT_FOR_REDIS: Final = 30.0
"""Default seconds ``run`` waits at start for a Redis that is not reachable yet."""
REDIS_RETRY_PAUSE: Final = (0.1, 2.0)
"""First and longest pause (seconds) between tries to reach Redis at start (doubling)."""


class NotReachable(Exception):
    """Redis did not answer within ``--wait-for-redis`` seconds."""


# -- the command ---------------------------------------------------------------------------


def register(cli: typer.Typer, load_app: LoadApp) -> None:
    """Add ``run`` to ``cli`` (``load_app`` resolves MODULE:ATTRIBUTE). Its options are
    annotated in place: typer reads the annotations as strings in this module's globals,
    which hold every name they use."""
    cli.command(name="run")(_command(load_app))


def _command(load_app: LoadApp) -> Callable[..., None]:
    def run(
        target: Annotated[str, typer.Argument(
            metavar="APP", help="The App to run, as MODULE:ATTRIBUTE.")],
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
        burst_wait: Annotated[float | None, typer.Option(
            metavar="SECONDS", callback=_burst_wait,
            help="Implies --burst, and also waits for (and runs) the scheduled jobs and "
                 "retries due within SECONDS, at most 86400 (a day; arq's burst waits for "
                 "every deferred job).")]
        = None,
        reload: Annotated[bool, typer.Option(
            "--reload", help="Development: restart the worker(s) when a .py file under the "
                             "current directory changes (the reload extra).")] = False,
    ) -> None:
        """Work jobs until SIGTERM/SIGINT, then shut down gracefully."""
        burst = burst or burst_wait is not None
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
                                    max_jobs=max_jobs, burst=burst, burst_wait=burst_wait)
            settings = _settings(app, overrides)
            code = _supervise(target, shared, url, processes=processes, max_memory=max_memory,
                              metrics_port=settings.metrics_port, burst=burst, reload=reload,
                              shutdown_timeout=settings.shutdown_timeout)
            anyio.run(app.close)  # the embedded server, if this process started it
            raise typer.Exit(code)
        try:
            # uvloop (the ``speed`` extra) when installed: a good share less CPU per job.
            uvloop = importlib.util.find_spec("uvloop") is not None
            code = anyio.run(_serve, app, overrides, url, wait_for_redis, burst, burst_wait or 0.0,
                             backend_options={"use_uvloop": uvloop})
        except Exception as exc:
            _fail_run(exc, url)
        _leave_abandoned_threads(code)
        raise typer.Exit(code)

    return run


# -- serving: Redis at start, signals, the worker ------------------------------------------


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


def _burst_wait(value: float | None) -> float | None:
    """--burst-wait's SECONDS: finite, 0 to a day (``stopper.check_ahead``)."""
    if value is None:
        return None
    try:
        return stopper.check_ahead(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


async def _serve(app: App, overrides: dict[str, Any], url: str, wait_for: float,
                 burst: bool = False, burst_wait: float = 0.0) -> int:
    """Run a worker until a signal stops it (or, ``burst``, its work is done — and none
    is due within ``burst_wait`` seconds — or it has
    fetched ``max_jobs``); the exit code: 0 graceful (or stopped while its lifespan was
    being entered), 1 hard, 4 (``EXIT_RECYCLE``) after ``max_jobs`` under a supervisor
    (which then starts a fresh process). A lifespan whose exit raised: 5, from
    ``_fail_run``."""
    # The handlers go in before the worker starts (and before Redis is waited for): a
    # SIGTERM while the worker starts stops it as soon as it runs, rather than killing
    # the process with fetched jobs in progress; while its lifespan is being entered, it
    # cancels the entry, within a bound (``cli/starting.py``).
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            if not await _until_reachable(url, wait_for, signals):
                return EXIT_OK
            bound = dataclasses.replace(app.settings, **overrides).shutdown_timeout
            desk = starting.Desk(signals)
            async with anyio.create_task_group() as tg:
                tg.start_soon(desk.watch)
                with starting.StartGuard(bound) as guard, desk.start:
                    async with app.worker(**overrides) as manager:
                        guard.disarm()
                        desk.started(manager)
                        _say_ready()
                        if burst:
                            tg.start_soon(stopper.stop_when_drained, cast(Manager, manager),
                                          burst_wait)
                        await manager.wait_stopped()
                tg.cancel_scope.cancel()
            if desk.stopped_starting:
                log.info("stopped while the worker's lifespan was being entered: no job "
                         "was taken")
                return EXIT_OK
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


# -- the options, the supervisor, the exit -------------------------------------------------


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
        fail(f"--reload needs watchfiles; {install_extra('reload')}")

    def argv_of(number: int) -> list[str]:
        port = [] if metrics_port is None else ["--metrics-port", str(metrics_port + number)]
        return supervising.child_argv(target, [*shared, *port])

    return supervising.Supervisor(argv_of, count, max_memory=memory, burst=burst,
                                  memory_grace=supervising.memory_grace(shutdown_timeout),
                                  reload_root=Path.cwd() if reload else None,
                                  env={environment.CHILD_REDIS_URL: url}).run()


def _child_options(*, concurrency: int | None, queue: list[str] | None,
                   wait_for_redis: float, log_level: str, log_format: str,
                   metrics_host: str | None, max_jobs: int | None, burst: bool,
                   burst_wait: float | None = None) -> list[str]:
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
    if burst_wait is not None:
        options += ["--burst-wait", repr(burst_wait)]
    return options


def _fail_run(exc: Exception, url: str) -> NoReturn:
    for leaf in leaves(exc):
        if isinstance(leaf, NotReachable):
            fail(str(leaf), EXIT_REDIS)
        if isinstance(leaf, LifespanExitFailed):  # the worker had stopped, jobs settled
            fail(str(leaf), EXIT_LIFESPAN)
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
