"""A browser's first request for the dashboard's icon finds one: ``/favicon.ico`` (asked
for at the root whatever a page says) and the icon each page links to. A 404 there is a
red line in every browser console, on every page."""

from __future__ import annotations

import re

import httpx


async def test_favicon_ico_is_served_as_an_image(client: httpx.AsyncClient) -> None:
    response = await client.get("/favicon.ico")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("image/svg+xml")
    assert response.text.lstrip().startswith("<svg")


async def test_each_page_links_to_an_icon_that_is_served(client: httpx.AsyncClient) -> None:
    page = await client.get("/")
    link = re.search(r'<link rel="icon" href="([^"]+)"', page.text)
    assert link is not None, "the page names no icon"
    icon = await client.get(link.group(1))
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
