"""The Metrics tab in a real browser (the ``stack`` of ``test_browser.py``: Debian's
Chromium, ``cogworker-async web`` and a ``cogworker-async run`` worker): jobs run in the
worker process show in the table and the chart, and a job's link opens its page with
the run-time heat map. Screenshots go to ``screenshots/`` as for the other tabs."""

from __future__ import annotations

import re
from typing import Final

from tests.waiting import wait_until
from tests.web.browser.test_browser import EXPECT_MS, Stack, async_api, stack  # noqa: F401

RECORDED: Final = {"record": 6, "slow": 2, "flaky": 1}
SLOW_SECONDS: Final = 0.3
FLUSHED: Final = 20.0
"""Seconds the worker process may take to run the jobs and write them (once a second)."""


async def _recorded(on: Stack) -> bool:
    summary = await on.inspector.metrics.summary()
    return {row.name: row.runs for row in summary.jobs} == RECORDED


async def test_the_metrics_tab_shows_runs_and_opens_a_job_class(stack: Stack) -> None:  # noqa: F811
    expect, page = async_api.expect, stack.page
    await stack.jobs.record.enqueue_many([((f"m-{i}",), {}) for i in range(RECORDED["record"])])
    for i in range(RECORDED["slow"]):
        await stack.jobs.slow.enqueue(f"slow-{i}", SLOW_SECONDS)
    await stack.jobs.flaky.enqueue("fails")
    await wait_until(lambda: _recorded(stack), timeout=FLUSHED, every=0.2)
    # The charts are drawn without script or inline style: nothing the CSP refuses, and
    # nothing else fails (but the favicon the browser asks for, which there is none of).
    errors: list[str] = []
    page.on("console", lambda message: errors.append(f"{message.text} ({message.location})")
            if message.type == "error" and "favicon" not in str(message.location) else None)

    await stack.goto("/")
    await page.get_by_role("link", name="Metrics", exact=True).click()
    await expect(page).to_have_url(re.compile(r"/metrics/jobs$"))
    await expect(page.get_by_role("heading", name=re.compile("^Metrics"))).to_be_visible()
    table = page.locator("table.metrics")
    # Most total run time first. Usually the two slow runs, but a loaded machine (the
    # suite runs in parallel) has made six quick runs take longer in all (964 ms against
    # 2 x 300 ms, in a fresh-clone CI): the order is checked against what was recorded.
    summary = await stack.inspector.metrics.summary()
    longest = max(summary.jobs, key=lambda row: row.total_ms).name
    await expect(table.locator("tbody tr").first).to_contain_text(longest)
    await expect(table.get_by_role("row", name=re.compile(r"^flaky\s+1\s+1\s"))).to_be_visible()
    await expect(table.get_by_role("row", name=re.compile(r"^record\s+6\s+0\s"))).to_be_visible()
    chart = page.locator("[data-metrics-chart] svg")
    await expect(chart).to_be_visible()
    await expect(chart.locator("polyline")).to_have_count(3)  # a line per job class
    await expect(page.locator("[data-metrics-chart] .legend")).to_contain_text("slow")
    await stack.shot("metrics")

    await page.get_by_role("link", name="2 h").click()
    await expect(page.locator("h1")).to_contain_text("the last 2 h")
    await expect(table.locator("tbody tr")).to_have_count(3)

    await table.get_by_role("link", name="slow", exact=True).click()
    await expect(page.locator("[data-job-name]")).to_have_text("slow")
    await expect(page.locator("[data-job-totals]")).to_contain_text("Runs")
    heat = page.locator("svg.heat-map")
    await expect(heat).to_be_visible()
    await expect(heat.locator("rect").first).to_be_visible()
    # Both runs took 300 ms and more: the heat map's top row is that slow bucket.
    await expect(page.locator(".heat-labels li").first).to_have_text(
        re.compile(r"^≤ (500 ms|1 s)$"))
    await expect(page.locator("table.minutes tbody tr").first).to_be_visible()
    await stack.shot("metrics-job")
    await page.get_by_role("link", name="Metrics", exact=True).first.click()
    await expect(page).to_have_url(re.compile(r"/metrics/jobs(\?window=120)?$"),
                                   timeout=EXPECT_MS)
    assert errors == []
