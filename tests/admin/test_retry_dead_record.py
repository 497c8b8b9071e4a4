"""A dead job retried by hand after its record expired keeps its name and enqueue time
(issue 45 item 6: ``job -``, ``enqueued -`` in ``cogworker-async job``): the record
made afresh at the retry takes them from the dead entry, as its record had them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.redis.store import Store


async def test_a_dead_job_retried_after_its_record_went_keeps_name_and_enqueue_time(
    make_app: Callable[..., App], store: Store,
) -> None:
    jobs = make_app()

    @jobs.job
    async def send_report(n: int) -> None: ...

    enqueued_at = time.time() - 3 * 86400  # days ago: its record expired since
    entry = json.dumps({"jid": "dead1", "class": "send_report", "args": [1],
                        "queue": "default", "enqueued_at": enqueued_at, "retry_count": 3,
                        "error_message": "boom", "error_class": "ValueError"})
    await store.client.zadd(store.keys.dead("default"), {entry: time.time()})
    await store.client.delete(store.keys.record("default", "dead1"))  # gone
    insp = Inspector(jobs)
    [record] = (await insp.dead.page()).items
    assert (await insp.dead.retry([record.token])).done == 1

    status = await jobs.status("dead1", queue="default")
    assert status.state == "queued"
    assert status.name == "send_report"
    assert status.enqueued_at is not None
    assert abs(status.enqueued_at - enqueued_at) < 1e-3
