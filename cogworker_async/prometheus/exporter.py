"""``cogworker-async metrics APP --port PORT``: the system-wide gauges (``system.py``) for
Prometheus, for those who run no dashboard. Needs the ``metrics`` extra, not ``web``.

How a scrape is answered: ``prometheus_client``'s HTTP server runs in threads
(``server.py``); its collector asks this command's event loop, through an anyio
``BlockingPortal``, to read Redis with the admin model (the App's pool lives on that
loop), and waits for the answer. The read is bounded (``system.SCRAPE_TIMEOUT``): Redis
down, refusing or hung gives ``cogworker_up 0`` and no other gauge — a scrape never
hangs, and the exporter keeps running (and starts) while Redis is away, saying so once
per outage in its log.

SIGTERM or SIGINT: stop listening (the port is freed), close the App's pools, exit 0.
A port in use or an address the machine lacks: ``error: ...``, exit 2.

This module imports ``prometheus_client`` only when the command runs: the CLI registers
the command whether or not the extra is installed.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Final

import anyio
import typer
from anyio.from_thread import BlockingPortal

from cogworker_async import logs
from cogworker_async.admin.api import Inspector
from cogworker_async.admin.cli import EXIT_USAGE, RedisUrl, Target, fail, open_app
from cogworker_async.app import App
from cogworker_async.errors import CogworkerError
from cogworker_async.urls import mask
from cogworker_async.worker.streak import Streak

if TYPE_CHECKING:
    from cogworker_async.prometheus.server import MetricsServer
    from cogworker_async.prometheus.system import SystemGauges

log = logging.getLogger(__name__)

LoadApp = Callable[[str], App]

DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback unless told: the gauges name queues and jobs."""
MAX_PORT: Final = 65535
STOPPING: Final = (signal.SIGTERM, signal.SIGINT)

Port = Annotated[int, typer.Option(min=0, max=MAX_PORT,
                                   help="Port to serve /metrics on (0: any free one).")]
Host = Annotated[str, typer.Option(help="Address to listen on (loopback unless told).")]
LogLevel = Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR.")]
LogFormat = Annotated[str, typer.Option(help="text, or json: one object per line.")]


def register(cli: typer.Typer, load_app: LoadApp) -> None:
    """Add ``metrics`` to ``cli`` (``load_app`` resolves MODULE:ATTRIBUTE)."""
    cli.command(name="metrics")(_metrics_command(load_app))


def _metrics_command(load_app: LoadApp) -> Callable[..., None]:
    def metrics(target: Target, port: Port, host: Host = DEFAULT_HOST,
                redis_url: RedisUrl = None, log_level: LogLevel = "INFO",
                log_format: LogFormat = "text") -> None:
        """Serve the system-wide Prometheus gauges (queues, sets, processes) until
        SIGTERM/SIGINT: an exporter for those who run no dashboard (the metrics extra)."""
        try:
            import prometheus_client  # noqa: F401  (only: is the extra there?)
        except ImportError as exc:
            fail("the metrics command needs the metrics extra "
                 f"(pip install 'cogworker-async[metrics]'): {exc}")
        level = logging.getLevelName(log_level.upper())
        if not isinstance(level, int):
            fail(f"unknown log level {log_level!r}: use DEBUG, INFO, WARNING or ERROR")
        try:
            logs.configure(level, log_format)
        except ValueError as exc:
            fail(str(exc))
        app = open_app(load_app, target, redis_url)
        try:
            url = app.redis_url()
            anyio.run(_export, app, url, host, port)
        except CogworkerError as exc:  # a port in use, an unusable URL: usage
            fail(str(exc), EXIT_USAGE)

    return metrics


async def _export(app: App, url: str, host: str, port: int) -> None:
    """Serve until a signal; then free the port and close the App's pools."""
    try:
        with anyio.open_signal_receiver(*STOPPING) as signals:
            async with BlockingPortal() as portal:
                server = await _listen(host, port, _reader(app, portal))
                try:
                    log.info("serving Prometheus metrics at %s (Redis at %s)", server.url,
                             mask(url))
                    async for signum in signals:
                        log.info("%s: stopping", signal.Signals(signum).name)
                        break
                finally:
                    await server.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await app.close()


def _reader(app: App, portal: BlockingPortal) -> Callable[[], SystemGauges | None]:
    """What a scrape (in a server thread) calls: one bounded read on the portal's loop."""
    from cogworker_async.prometheus.system import READING, read_bounded

    inspector = Inspector(app)
    streak = Streak(READING)

    def read_now() -> SystemGauges | None:
        try:
            return portal.call(read_bounded, inspector, streak)
        except RuntimeError:  # the portal has stopped: the exporter is on its way out
            return None

    return read_now


async def _listen(host: str, port: int, read_now: Callable[[], SystemGauges | None]
                  ) -> MetricsServer:
    from prometheus_client import CollectorRegistry

    from cogworker_async.prometheus.server import listen
    from cogworker_async.prometheus.system import SystemCollector

    registry = CollectorRegistry()
    registry.register(SystemCollector(read_now))
    # Shielded: a server made while this was cancelled would never be closed.
    with anyio.CancelScope(shield=True):
        server = await anyio.to_thread.run_sync(listen, host, port, registry)
    return server
