"""An App on the session's private Redis with one job that records what it received,
for the properties that need a real worker; and a way to start each example clean.

Hypothesis runs a test's examples one after another with the same fixtures, so each
example first deletes every key of the test's namespace (and what the job recorded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.redis.store import Store

SCAN_STEP: Final = 1000
"""Keys a SCAN step asks for: the session server holds every earlier test's keys, and a
namespace's few are found in a few round trips, not thousands."""
RECORD: Final = "prop.record"
"""The registered name of the recording job (what a stored payload's ``class`` says)."""


@dataclass(frozen=True, slots=True)
class Received:
    jid: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class Bench:
    app: App
    record: JobFunction[..., Any]
    received: list[Received] = field(default_factory=list)

    def jids(self) -> list[str]:
        return [run.jid for run in self.received]


def build_bench(app: App) -> Bench:
    bench: Bench

    async def record(*args: Any, **kwargs: Any) -> None:
        bench.received.append(Received(current_job().jid, args, kwargs))

    bench = Bench(app, app.job(name=RECORD, retry=False)(record))
    return bench


async def wipe(store: Store) -> None:
    """Delete every key of the store's namespace: the next example starts empty."""
    keys = [key async for key in store.client.scan_iter(match=f"{store.keys.namespace}:*",
                                                         count=SCAN_STEP)]
    if keys:
        await store.client.delete(*keys)
