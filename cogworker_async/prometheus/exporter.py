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
the command (``cli/metrics.py``) whether or not the extra is installed.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import anyio
from anyio.from_thread import BlockingPortal

from cogworker_async.admin.api import Inspector
from cogworker_async.app import App
from cogworker_async.redis.urls import mask
from cogworker_async.worker.streak import Streak

if TYPE_CHECKING:
    from cogworker_async.prometheus.server import MetricsServer
    from cogworker_async.prometheus.system import SystemGauges

log = logging.getLogger(__name__)

DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback unless told: the gauges name queues and jobs."""
MAX_PORT: Final = 65535
STOPPING: Final = (signal.SIGTERM, signal.SIGINT)

async def export(app: App, url: str, host: str, port: int) -> None:
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


def missing_extra() -> str | None:
    """Why the exporter cannot run here (the ``metrics`` extra is not installed), or
    None. Asked here, not by the command: only this package imports prometheus_client."""
    try:
        import prometheus_client  # noqa: F401  (only: is the extra there?)
    except ImportError as exc:
        return str(exc)
    return None


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
