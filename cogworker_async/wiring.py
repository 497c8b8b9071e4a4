"""Wiring: the extras a worker process runs when its settings ask — the outbox relay
(``App(outbox=...)``, the ``outbox`` extra, SQLAlchemy) and the process's Prometheus
metrics (``metrics_port``, the ``metrics`` extra) — built here and handed to the
``Manager`` as its ``Extras`` (``worker/observers.py``).

Why here, at the App's layer: the worker sits below both extras' packages
(``tests/test_layering.py``), so it must not import them, not even lazily; the App,
above them, may. Each extra's package is imported only inside the function that builds
it, and only when the settings ask: a process without an extra pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Final

from cogworker_async.errors import ConfigurationError, install_extra
from cogworker_async.settings import Settings
from cogworker_async.worker.observers import OUTCOMES, ProcessMetrics, Vitals

if TYPE_CHECKING:
    from cogworker_async.outbox.relay import OutboxRelay
    from cogworker_async.redis.store import Store


class Wiring:
    """The real ``Extras``: each extra built when its setting asks, else None."""

    __slots__ = ()

    def relay(self, settings: Settings, store: Store, names: Collection[str]
              ) -> OutboxRelay | None:
        """The outbox relay if ``settings.outbox`` asks for one (the ``outbox`` extra,
        SQLAlchemy, already imported by whoever built that ``Outbox``), else None.
        ``names``: the App's jobs (the rows it takes)."""
        if settings.outbox is None:
            return None
        from cogworker_async.outbox.relay import OutboxRelay

        return OutboxRelay(settings.outbox, store, names)

    def metrics(self, settings: Settings, vitals: Callable[[], Vitals],
                registered: Collection[str] = ()) -> ProcessMetrics | None:
        """The process's Prometheus metrics if ``settings.metrics_port`` asks for them
        (the ``metrics`` extra: a clear error without it), else None — and nothing
        imported."""
        if settings.metrics_port is None:
            return None
        try:
            from cogworker_async.prometheus.process import WorkerMetrics
        except ImportError as exc:
            raise ConfigurationError(
                f"metrics_port needs the metrics extra ({exc}); "
                f"{install_extra('metrics')}") from None
        # registered: series of their own; the outcomes passed, since the metrics do not
        # import the worker: each counter starts at 0.
        return WorkerMetrics(settings, vitals, registered, outcomes=OUTCOMES)


WIRING: Final = Wiring()
"""The wiring every App's worker gets."""
