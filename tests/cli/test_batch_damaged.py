"""``cogworker-async batch`` on a batch whose keys a co-tenant damaged (issue 40, defect
2): one line that says so and exit 1, never a traceback; ``--json`` says it too."""

from __future__ import annotations

import pytest

from cogworker_async.cli.batch import EXIT_DAMAGED
from tests.cli import adminapp
from tests.cli.conftest import in_loop, invoke

pytestmark = pytest.mark.timeout(60)

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("damage", ["deep callbacks", "not a number", "wrong type"])
def test_a_damaged_batch_is_one_line_and_exit_1(jobs: adminapp.Jobs, damage: str) -> None:
    async def make() -> str:
        async with jobs.app.batch("nightly") as batch:
            await jobs.ok.enqueue_in(3600, "later")
        store = jobs.app._store()
        key = store.keys.batch(batch.bid)
        if damage == "deep callbacks":
            await store.client.hset(key, "callbacks", DEEP)
        elif damage == "not a number":
            await store.client.hset(key, "created_at", "yesterday")
        else:
            await store.client.delete(store.keys.batch_set(batch.bid, "pending"))
            await store.client.set(store.keys.batch_set(batch.bid, "pending"), "x")
        return batch.bid
    bid = in_loop(jobs, make)

    shown = invoke("batch", bid)

    assert shown.exit_code == EXIT_DAMAGED, shown.output
    assert f"batch {bid}: damaged" in shown.stdout
    assert "Traceback" not in shown.output
    as_json = invoke("batch", bid, "--json")
    assert as_json.exit_code == EXIT_DAMAGED
    assert '"state": "damaged"' in as_json.stdout
