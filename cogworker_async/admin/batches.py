"""Batches as the dashboard's Batches tab shows them (``Inspector.batches``): pages of
the open ones and of every batch kept, newest first; one batch's status and a sample of
its members; cancelling one.

    page = await insp.batches.page("open")          # Page[BatchRow], 25 a page
    found = await insp.batches.status(bid)          # BatchStatus; None: unreadable
    shown = await insp.batches.members(bid)         # set -> up to 50 jids
    cancelled = await insp.batches.cancel(bid)      # App.cancel_batch: how many

Every read is bounded, however many batches there are and however large one is: a page
is one ZREVRANGE and a status read per row; members are sampled (``MEMBERS_SHOWN`` of
each set, by SSCAN), never listed whole. A batch's status is read as
``App.batch_status`` reads it; one whose hash was damaged (written by hand, or by
another program in the namespace) is reported unreadable rather than failing the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from cogworker_async.admin.records import PAGE_SIZE, Page, page_bounds
from cogworker_async.jobs.status import check_jid
from cogworker_async.redis.batches import BatchIndex
from cogworker_async.workflows.batch import BatchStatus

if TYPE_CHECKING:
    from cogworker_async.admin.base import InspectorView

MEMBER_SETS: Final = ("pending", "succeeded", "dead", "cancelled")
"""A batch's member sets, in the order a page shows them."""
MEMBERS_SHOWN: Final = 50
"""Member jids a batch's page shows of each set (the counts say how many there are)."""
ENDED: Final = frozenset({"success", "complete", "dead", "abandoned"})
"""The states of ``batch.BatchState`` a batch ends in, for good: nothing of it is left
to cancel (abandoned: its block raised, and cancelled the members it had added)."""


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One batch of a list: what its index says, and its status."""

    bid: str
    listed_at: float
    """Its score in the list: when it was opened."""
    status: BatchStatus | None
    """None: its hash cannot be read (not what the batch scripts write)."""

    @property
    def created_at(self) -> float:
        if self.status is not None and self.status.created_at is not None:
            return self.status.created_at
        return self.listed_at


class Batches:
    """One App's batches (``Inspector.batches``)."""

    def __init__(self, inspector: InspectorView) -> None:
        self._inspector = inspector

    async def page(self, index: BatchIndex, number: int = 1,
                   size: int = PAGE_SIZE) -> Page[BatchRow]:
        """Page ``number`` of the open batches (``"open"``) or of every batch kept
        (``"all"``), newest first."""
        start, _, size = page_bounds(number, size)
        total, entries = await self._inspector.admin().store.batches.page(index, start, size)
        rows = [BatchRow(bid, listed_at, await self.status(bid)) for bid, listed_at in entries]
        return Page(rows, number, size, total)

    async def status(self, bid: str) -> BatchStatus | None:
        """What batch ``bid`` has come to (state ``unknown``: no such batch, or it
        expired); None: its hash cannot be read, or ``bid`` cannot be a bid (a list's
        entry written by hand)."""
        try:
            found = await self._inspector.app.batch_status(check_jid(bid))
        except (TypeError, ValueError):  # a list's entry that cannot be a bid
            return None
        return None if found.state == "damaged" else found

    async def members(self, bid: str, limit: int = MEMBERS_SHOWN) -> dict[str, list[str]]:
        """Up to ``limit`` member jids of each of ``bid``'s sets, by set."""
        batches = self._inspector.admin().store.batches
        return {which: await batches.sample(check_jid(bid), which, limit)
                for which in MEMBER_SETS}

    async def cancel(self, bid: str) -> int:
        """Cancel every member of ``bid`` not ended, child batches' too
        (``App.cancel_batch``); how many were cancelled or asked to stop."""
        return await self._inspector.app.cancel_batch(check_jid(bid))
