"""The dashboard on wide screens, in Debian's Chromium against ``cogworker-async web``
and a worker (``test_browser.py``'s ``stack``): past 1400 px the page is a centred
column — at 1920 px it sat left with a third of the screen blank — and the header's
brand, the totals and the content start at one left edge; at 1024 and 1400 px the
content still fills the window.

Geometry is read from the page (bounding boxes), never from a screenshot.
"""

from __future__ import annotations

from typing import Final

import pytest

from tests.web.browser.test_browser import Stack, async_api, stack  # noqa: F401

PAGE: Final = 1400
"""The column's width (``--page`` in dashboard.css)."""
HEIGHT: Final = 860
SLACK: Final = 1.0
"""Pixels two edges may differ by (subpixel rounding)."""


async def _box(locator: async_api.Locator) -> dict[str, float]:
    box = await locator.bounding_box()
    assert box is not None, f"{locator} is not rendered"
    return box


@pytest.mark.parametrize("width", [1024, 1400, 1920])
async def test_the_content_is_a_centred_column_lined_up_with_the_header(
        stack: Stack, width: int) -> None:  # noqa: F811
    page = stack.page
    await page.set_viewport_size({"width": width, "height": HEIGHT})
    await stack.goto("/")
    main = await _box(page.locator("main"))
    left, right = main["x"], width - main["x"] - main["width"]
    assert abs(left - right) <= SLACK, f"the content is off-centre at {width} px: {main}"
    assert main["width"] == pytest.approx(min(width, PAGE), abs=SLACK), \
        f"the content does not use the width it has at {width} px: {main}"
    first_card = await _box(page.locator("main .card").first)
    brand = await _box(page.locator("header .brand"))
    totals = await _box(page.locator("section.summary b").first)
    assert abs(brand["x"] - first_card["x"]) <= SLACK, \
        f"the brand and the content start at different edges at {width} px"
    # The totals' figures sit 4 px further in than the content's edge at every width.
    assert totals["x"] - first_card["x"] == pytest.approx(4, abs=SLACK), \
        f"the totals and the content start at different edges at {width} px"
