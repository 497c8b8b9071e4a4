"""``run --processes --max-memory`` against what a hostile probe found (issue 25), on real
processes and a real Redis: the limit escalates to SIGKILL and a job too big for it goes
to dead, whether it blocks the loop while it allocates or runs as a plain function.
(The rest of the probe's findings: test_supervisor_hardening.py, whose fixtures these use.)"""

from __future__ import annotations

import signal
from typing import Any

import pytest
import redis.asyncio

from tests.cli.supervisor.test_supervisor import r as r
from tests.cli.supervisor.test_supervisor_hardening import _buried_while_it_ran
from tests.cli.supervisor.test_supervisor_hardening import app as app
from tests.cli.supervisor.test_supervisor_hardening import fleet as fleet
from tests.worker.chaos.processes import chaosapp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


@pytest.mark.parametrize("job", ["hog", "plain_hog"])
async def test_a_job_too_big_for_max_memory_is_killed_and_goes_to_dead(
    fleet: Any, app: Any, r: redis.asyncio.Redis, namespace: str, job: str,
) -> None:
    """--max-memory only sent SIGTERM: a job blocking the loop while allocating went from
    172 MiB to 1.6 GB; a plain function over the limit was given back at the shutdown
    deadline and run again forever. Now SIGKILL after a grace (half the 6 s
    shutdown_timeout), the job recovered as an orphan, counted, and buried."""
    sup = fleet("--processes", "1", "--max-memory", "150M", shutdown_timeout=6.0)
    jid = await app.enqueue(job, "big", 400)
    entry = await _buried_while_it_ran(r, namespace, jid, sup)
    assert entry["error_class"] == "ProcessDied"
    log = sup.log()
    assert "over --max-memory" in log
    assert "killing it (SIGKILL" in log
    assert (await chaosapp.counts(r, chaosapp.finished_key(namespace)))["big"] == 0
    sup.signal(signal.SIGTERM)
    assert await sup.wait_exit(30) == 0
