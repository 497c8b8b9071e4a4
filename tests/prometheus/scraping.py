"""Scraping a metrics endpoint as Prometheus does, and reading what it said."""

from __future__ import annotations

from typing import Final

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

SCRAPE_TIMEOUT: Final = 10.0
"""Seconds one scrape may take (Prometheus' default scrape timeout)."""


def parse(text: str) -> list[Sample]:
    """Every sample of an exposition, with Prometheus' own parser (which refuses a
    malformed one)."""
    return [sample for family in text_string_to_metric_families(text)
            for sample in family.samples]


async def scrape(port: int, host: str = "127.0.0.1") -> list[Sample]:
    """GET ``/metrics`` and parse it; a status other than 200 fails the test."""
    async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT) as client:
        response = await client.get(f"http://{host}:{port}/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The value of the one sample named ``name`` whose labels include ``labels``; None
    if there is none."""
    found = [s.value for s in samples
             if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) <= 1, f"{len(found)} samples of {name}{labels}"
    return found[0] if found else None


def names(samples: list[Sample]) -> set[str]:
    return {s.name for s in samples}
