"""The dashboard's layout at the widths people use (1024, 1400 and 1920 px), in Debian's
Chromium against ``cogworker-async web`` and a ``cogworker-async run`` worker (the
``stack`` of ``test_browser.py``): on every tab the header is one row whose brand and
jid search never wrap, every tab of the nav is in view and takes a click (no hidden
horizontal scroll), and on Busy the running jobs sit below their own table's headers.

Geometry is read from the page (bounding boxes, line boxes), never from a screenshot.
"""

from __future__ import annotations

from typing import Final

import pytest

from cogworker_async.web.site import TABS
from tests.web.browser.test_browser import EXPECT_MS, Stack, async_api, stack  # noqa: F401

WIDTHS: Final = (1024, 1400, 1920)
HEIGHT: Final = 860
RUNNING_SECONDS: Final = 60.0
"""Longer than the test: the job is still running when Busy is looked at."""

LINES: Final = """(element) => {
    const range = document.createRange();
    range.selectNodeContents(element);
    return new Set([...range.getClientRects()].filter((r) => r.width > 0)
        .map((r) => Math.round(r.top))).size;
}"""
"""How many lines an element's text takes (its line boxes' distinct tops)."""
NAV_SCROLLS: Final = "(nav) => nav.scrollWidth > nav.clientWidth"


async def _box(locator: async_api.Locator) -> dict[str, float]:
    box = await locator.bounding_box()
    assert box is not None, f"{locator} is not rendered"
    return box


def _share_a_row(one: dict[str, float], other: dict[str, float]) -> bool:
    return one["y"] < other["y"] + other["height"] and other["y"] < one["y"] + one["height"]


async def _check_header(page: async_api.Page, width: int, tab: str) -> None:
    brand, search = page.locator("header .brand"), page.locator("header form.jid-search")
    button = search.get_by_role("button", name="Find job")
    where = f"{tab} at {width} px"
    assert await brand.evaluate(LINES) == 1, f"the brand wraps ({where})"
    assert await button.evaluate(LINES) == 1, f"'Find job' wraps ({where})"
    assert _share_a_row(await _box(brand), await _box(search)), \
        f"the brand and the jid search are on different rows ({where})"
    nav = page.locator("header nav.tabs")
    assert not await nav.evaluate(NAV_SCROLLS), f"the nav scrolls sideways ({where})"
    links = nav.locator("a")
    assert await links.count() == len(TABS)
    for index, (_, label) in enumerate(TABS):
        link = links.nth(index)
        box = await _box(link)
        outside = f"tab {label} is outside the viewport ({where}): {box}"
        assert box["x"] >= 0, outside
        assert box["x"] + box["width"] <= width, outside
        assert box["y"] >= 0, outside
        assert box["y"] + box["height"] <= HEIGHT, outside
        await link.click(trial=True, timeout=EXPECT_MS)  # visible, stable, not covered


async def _check_busy(page: async_api.Page, width: int) -> None:
    processes = page.locator("table.processes")
    running = page.locator("table.jobs-running")
    first_job = running.locator("tbody tr.running").first
    await async_api.expect(first_job).to_contain_text("slow", timeout=EXPECT_MS)
    headers = await _box(running.locator("thead"))
    job = await _box(first_job)
    assert job["y"] >= headers["y"] + headers["height"] - 0.5, \
        f"the first running job overlaps its table's headers at {width} px: {job}, {headers}"
    table = await _box(processes)
    assert (await _box(running))["y"] >= table["y"] + table["height"], \
        f"the running jobs overlap the processes table at {width} px"


@pytest.mark.parametrize("width", WIDTHS)
async def test_every_tab_fits_the_header_and_busy_rows_sit_below_their_headers(
        stack: Stack, width: int) -> None:  # noqa: F811
    expect, page = async_api.expect, stack.page
    await page.set_viewport_size({"width": width, "height": HEIGHT})
    # Badges with counts in them (they widen the tabs), and a job running on Busy.
    await stack.jobs.report.enqueue_many([((f"report {i}",), {}) for i in range(1234)])
    await stack.jobs.record.enqueue_in(3600, "later")
    assert await stack.jobs.slow.enqueue("busy-now", RUNNING_SECONDS) is not None

    await stack.goto("/")
    for index, (name, label) in enumerate(TABS):
        # Reached the way a person reaches it: a click on its tab, from the last one.
        link = page.locator("header nav.tabs a").nth(index)
        await link.click()
        await expect(link).to_have_attribute("aria-current", "page", timeout=EXPECT_MS)
        await _check_header(page, width, label)
        if name == "busy":
            await _check_busy(page, width)
