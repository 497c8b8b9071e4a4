"""``cogworker-async batch app:jobs BID``: one batch's status for a person and for a
script, and ``--cancel``; an unknown bid's own exit code."""

from __future__ import annotations

from typing import Final

import pytest

from cogworker_async.cli.batch import EXIT_UNKNOWN
from tests.cli import adminapp
from tests.cli.conftest import in_loop, invoke, invoke_json

pytestmark = pytest.mark.timeout(60)

EXIT_USAGE: Final = 2


def open_batch(jobs: adminapp.Jobs, count: int) -> tuple[str, list[str]]:
    async def make() -> tuple[str, list[str]]:
        jids = []
        async with jobs.app.batch("nightly", on_complete=jobs.ok.s("done")) as batch:
            for i in range(count):
                jid = await jobs.ok.enqueue_in(3600, f"later-{i}")  # waits: nobody runs it
                assert jid is not None
                jids.append(jid)
        return batch.bid, jids
    return in_loop(jobs, make)


def test_a_running_batch_as_a_table_and_as_json(jobs: adminapp.Jobs) -> None:
    bid, _ = open_batch(jobs, 3)

    shown = invoke("batch", bid)

    assert shown.exit_code == 0, shown.output
    assert f"batch {bid}" in shown.stdout
    assert "running" in shown.stdout
    assert "3: 3 pending, 0 succeeded, 0 dead, 0 cancelled" in shown.stdout
    assert "nightly" in shown.stdout
    found = invoke_json("batch", bid)
    assert (found["bid"], found["state"], found["total"], found["pending"]) == (
        bid, "running", 3, 3)
    assert found["callbacks"] == {}


def test_cancel_cancels_the_members_and_says_how_many(jobs: adminapp.Jobs) -> None:
    bid, jids = open_batch(jobs, 2)

    found = invoke_json("batch", bid, "--cancel")

    assert found["cancelled"] == 2

    async def states() -> list[str]:
        return [(await jobs.app.status(jid)).state for jid in jids]
    assert in_loop(jobs, states) == ["cancelled", "cancelled"]  # never to run


def test_an_unknown_bid_exits_4_and_a_bad_one_2(jobs: adminapp.Jobs) -> None:
    unknown = invoke("batch", "no-such-batch")
    assert unknown.exit_code == EXIT_UNKNOWN
    assert "unknown" in unknown.stdout
    bad = invoke("batch", 'with"quote')
    assert bad.exit_code == EXIT_USAGE, bad.output
