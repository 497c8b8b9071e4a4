"""The dashboard in a real browser: Debian's Chromium (never a downloaded one), driven
by Playwright, against ``cogworker-async web`` and a ``cogworker-async run`` worker
working real jobs. Screenshots of every tab go to ``screenshots/`` for a person to look.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
import redis.asyncio

from cogworker_async.admin import Inspector
from tests.waiting import wait_until
from tests.web.browser import jobsapp
from tests.web.browser.webproc import WebProcess
from tests.workerproc import ROOT, WorkerProcess, worker_pool

if TYPE_CHECKING:
    from playwright.async_api import Page

CHROMIUM: Final = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("no /usr/bin/chromium (apt-get install chromium; .ci/run does)",
                allow_module_level=True)
async_api = pytest.importorskip("playwright.async_api",
                                reason="the playwright package is not installed")

SCREENSHOTS: Final = ROOT / "screenshots"
EXPECT_MS: Final = 10_000
VIEWPORT: Final = {"width": 1280, "height": 860}

pytestmark = pytest.mark.timeout(120)

RISEN: Final = """() => {
    const points = document.querySelector("polyline.processed").getAttribute("points")
        .split(" ").filter(Boolean);
    return points.length >= 4 && points.some((point) => parseFloat(point.split(",")[1]) < 150);
}"""
"""The processed line has a few points, some above the baseline (y=158 is zero)."""


@dataclass
class Stack:
    jobs: jobsapp.Jobs
    inspector: Inspector
    redis: redis.asyncio.Redis
    namespace: str
    url: str
    page: Page

    async def ran(self) -> list[str]:
        tags = await self.redis.lrange(jobsapp.ran_key(self.namespace), 0, -1)
        return [tag.decode() if isinstance(tag, bytes) else tag for tag in tags]

    async def goto(self, path: str) -> None:
        response = await self.page.goto(self.url + path)
        assert response is not None, path
        assert response.status == 200, path

    async def shot(self, name: str) -> None:
        SCREENSHOTS.mkdir(exist_ok=True)
        await self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
async def stack(redis_url: str, namespace: str) -> AsyncIterator[Stack]:
    jobs = jobsapp.build(redis_url, namespace)
    web = WebProcess(redis_url, namespace).start()
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        with worker_pool() as workers:
            workers.append(WorkerProcess(redis_url, namespace, {}, [
                "--queue", "default", "--concurrency", "4", "--log-level", "WARNING"],
                target=jobsapp.TARGET).start())
            await web.wait_ready()
            async with async_api.async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=str(CHROMIUM),
                                                           headless=True)
                try:
                    page = await browser.new_page(viewport=VIEWPORT)
                    yield Stack(jobs, Inspector(jobs.app), client, namespace, web.url, page)
                finally:
                    await browser.close()
    finally:
        web.stop()
        await client.aclose()
        await jobs.app.close()


async def _sizes_are(stack: Stack, dead: int, retries: int) -> bool:
    return (await stack.inspector.dead.size() == dead
            and await stack.inspector.retries.size() == retries)


async def test_every_tab_against_a_running_worker(stack: Stack) -> None:
    expect, page = async_api.expect, stack.page
    for i in range(5):
        await stack.jobs.record.enqueue(f"done-{i}")
    for i in range(3):
        await stack.jobs.report.enqueue(f"<b>report {i}</b>")
    running = await stack.jobs.slow.enqueue("busy-now", 30.0)
    assert running is not None
    await stack.jobs.flaky.enqueue("dead-one")
    await stack.jobs.failing.enqueue("retry-one")
    await stack.jobs.record.enqueue_in(jobsapp.HOUR, "scheduled-one")
    await wait_until(lambda: _sizes_are(stack, dead=1, retries=1))

    await stack.goto("/")
    # The live graph: two polls two seconds apart make the first point; a burst of jobs
    # run meanwhile shows as a rise above the baseline.
    await expect(page.locator('[data-rate="processed"]')).not_to_have_text("–",
                                                                          timeout=EXPECT_MS)
    await stack.jobs.record.enqueue_many([((f"burst-{i}",), {}) for i in range(200)])
    await page.wait_for_function(RISEN, timeout=EXPECT_MS * 2)
    await expect(page.locator(".facts")).to_contain_text(re.compile("redis|valkey"))
    await expect(page.locator(".card", has_text="Queues")).to_contain_text("reports")
    await stack.shot("dashboard")

    await stack.goto("/queues")
    await expect(page.get_by_role("row", name=re.compile(r"reports\s+3"))).to_be_visible()
    await stack.shot("queues")
    await page.get_by_role("link", name="reports", exact=True).click()
    await expect(page.locator("tbody tr")).to_have_count(3)
    # The argument is shown as text, not markup.
    await expect(page.locator("code.args").first).to_contain_text("<b>report 0</b>")
    await stack.shot("queue-reports")

    await stack.goto("/busy")
    await expect(page.locator("tr.running")).to_contain_text("slow", timeout=EXPECT_MS)
    await expect(page.locator("table.processes")).to_contain_text("1 of 4")
    await stack.shot("busy")
    # The running job's own page, found with the header's jid search.
    await page.get_by_role("searchbox", name="Find a job by its jid").fill(running)
    await page.get_by_role("button", name="Find job").click()
    await expect(page.locator("h1")).to_contain_text(f"Job {running} running")
    await expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    await stack.shot("job")

    await stack.goto("/scheduled")
    await expect(page.locator("tbody")).to_contain_text("scheduled-one")
    await expect(page.locator("tbody")).to_contain_text("in 1 h")
    await stack.shot("scheduled")

    await stack.goto("/retries")
    await expect(page.locator("tbody")).to_contain_text("not fixed yet: retry-one")
    await stack.shot("retries")

    await stack.goto("/dead")
    await expect(page.locator("tbody")).to_contain_text("not fixed yet: dead-one")
    await stack.shot("dead")
    await page.get_by_role("link", name="flaky").click()
    await expect(page.get_by_role("heading", name="Backtrace")).to_be_visible()
    await expect(page.locator("pre.error")).to_contain_text("RuntimeError: not fixed yet")
    await stack.shot("dead-job")

    await stack.goto("/periodic")
    await expect(page.locator("tbody")).to_contain_text("nightly")
    await expect(page.locator("tbody")).to_contain_text("0 3 * * *")
    await stack.shot("periodic")


async def test_retry_a_dead_job_from_the_dead_tab_and_it_runs(stack: Stack) -> None:
    expect, page = async_api.expect, stack.page
    await stack.jobs.flaky.enqueue("comes-back")
    await wait_until(lambda: _sizes_are(stack, dead=1, retries=0))
    await stack.redis.set(jobsapp.healed_key(stack.namespace), "1")  # the bug is fixed

    await stack.goto("/dead")
    await page.locator("input[data-select-all]").check()
    await expect(page.locator('input[name="token"]')).to_be_checked()
    await page.get_by_role("button", name="Retry now").click()
    await expect(page.locator(".notice")).to_have_text("Put back on its queue: 1 job.")
    await wait_until(lambda: _ran_once(stack, "comes-back"))
    await stack.goto("/dead")
    await expect(page.get_by_text("No dead jobs.")).to_be_visible()


async def _ran_once(stack: Stack, tag: str) -> bool:
    return await stack.ran() == [tag]


async def test_posts_need_the_token_and_bulk_actions_ask_first(stack: Stack) -> None:
    expect, page = async_api.expect, stack.page
    await stack.jobs.failing.enqueue("stays")
    await wait_until(lambda: _sizes_are(stack, dead=0, retries=1))
    await stack.goto("/retries")

    # Same origin, with the cookie, but without the form's token: refused.
    status, text = await page.evaluate("""async () => {
        const response = await fetch("/retries/delete", {method: "POST",
            headers: {"content-type": "application/x-www-form-urlencoded"}, body: "all=1"});
        return [response.status, await response.text()];
    }""")
    assert status == 403
    assert "CSRF token" in text
    assert await stack.inspector.retries.size() == 1

    # "Delete all" asks first: dismissed, nothing happens; accepted, it is done.
    page.once("dialog", lambda dialog: dialog.dismiss())
    await page.get_by_role("button", name="Delete all").click()
    await expect(page.locator("tbody tr")).to_have_count(1)
    assert await stack.inspector.retries.size() == 1
    page.once("dialog", lambda dialog: dialog.accept())
    await page.get_by_role("button", name="Delete all").click()
    await expect(page.locator(".notice")).to_have_text("Deleted: 1 job.")
    assert await stack.inspector.retries.size() == 0
