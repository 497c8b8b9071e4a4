"""``cogworker-async outbox-relay app:jobs``: the outbox relay alone, for an App whose
``outbox`` is set (``outbox/__init__.py``) when no worker process should relay (workers relay
themselves with ``App(outbox=...)``). It relays until SIGTERM or SIGINT, and says its
backlog (rows waiting, the oldest's age) in the log when it changes; errors are the
admin commands' (exit 2: no outbox, 3: Redis out of reach).
"""

from __future__ import annotations

import logging
import signal
from typing import Any, Final

import anyio
import typer

from cogworker_async import logs
from cogworker_async.cli import common

log = logging.getLogger("cogworker_async.outbox")
STOPPING: Final = (signal.SIGTERM, signal.SIGINT)
REPORT_EVERY: Final = 10.0
"""Seconds between two log lines of the backlog while it is not empty."""


def register(cli: typer.Typer, load_app: common.LoadApp) -> None:
    cli.command(name="outbox-relay")(_command(load_app))


def _command(load_app: common.LoadApp) -> Any:
    def outbox_relay(target: common.Target, redis_url: common.RedisUrl = None) -> None:
        """Relay the App's outbox (App(outbox=Outbox(engine))) to Redis until stopped."""
        app = common.open_app(load_app, target, redis_url)
        if app.settings.outbox is None:
            common.fail(f"{target} has no outbox: give its App outbox=Outbox(engine) "
                        "(cogworker_async.outbox)")
        logs.configure(logging.INFO, "text")
        common.run_in_loop(app, lambda insp: _relay(insp.app))
    return outbox_relay


async def _relay(app: Any) -> None:
    from cogworker_async.outbox.relay import OutboxRelay

    relay = OutboxRelay(app.settings.outbox, app._store(), app.registry.keys())
    with anyio.open_signal_receiver(*STOPPING) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay.run)
            tg.start_soon(_report, relay)
            log.info("relaying the outbox (%s) to Redis", relay.outbox.table.name)
            async for signum in signals:
                log.info("%s: stopping", signal.Signals(signum).name)
                break
            tg.cancel_scope.cancel()


async def _report(relay: Any) -> None:
    """The backlog in the log, while there is one."""
    while True:
        await anyio.sleep(REPORT_EVERY)
        if relay.backlog.rows:
            log.info("outbox: %d rows waiting, the oldest for %.1fs (%d relayed)",
                     relay.backlog.rows, relay.backlog.lag, relay.relayed)
