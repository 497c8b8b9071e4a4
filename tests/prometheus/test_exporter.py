"""``cogworker-async metrics APP --port PORT``, run as a real process (what a person, or a
container, runs): it serves the system-wide gauges, keeps serving ``cogworker_up 0``
while Redis is away, stops cleanly on SIGTERM, and refuses a port in use."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import anyio
import httpx
import pytest

from tests.cli import adminapp
from tests.prometheus.scraping import parse, value
from tests.servers import free_port
from tests.waiting import wait_until

ROOT: Final = Path(__file__).resolve().parents[2]
COMMAND: Final = Path(sys.executable).parent / "cogworker-async"
START_TIMEOUT: Final = 30.0
"""Seconds the command may take to serve (imports on a busy 2-core machine)."""
STOP_TIMEOUT: Final = 10.0
"""Seconds it may take to exit after SIGTERM."""


@pytest.fixture
async def jobs(redis_url: str, namespace: str) -> AsyncIterator[adminapp.Jobs]:
    built = adminapp.build(namespace, redis_url)
    yield built
    await built.app.close()


@contextmanager
def exporter(namespace: str, redis_url: str, port: int, log: Path,
             *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """The command on ``port``; killed (by its pid) if the test leaves it running."""
    env = {**os.environ, "COGWORKER_REDIS_URL": redis_url, adminapp.NAMESPACE_ENV: namespace}
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [str(COMMAND), "metrics", adminapp.TARGET, "--port", str(port), *extra],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def scraped(port: int) -> str | None:
    """The body of ``/metrics``, or None while nothing answers yet."""
    try:
        async with httpx.AsyncClient(timeout=START_TIMEOUT) as client:
            response = await client.get(f"http://127.0.0.1:{port}/metrics")
    except httpx.TransportError:
        return None
    assert response.status_code == 200
    return response.text


async def first_scrape(port: int, process: subprocess.Popen[bytes]) -> str:
    bodies: list[str] = []

    async def answered() -> bool:
        assert process.poll() is None, "the exporter exited"
        body = await scraped(port)
        if body is not None:
            bodies.append(body)
        return bool(bodies)

    await wait_until(answered, timeout=START_TIMEOUT, every=0.1)
    return bodies[0]


async def stopped(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return await anyio.to_thread.run_sync(process.wait, STOP_TIMEOUT)


async def test_it_serves_the_gauges_and_stops_on_sigterm(
    jobs: adminapp.Jobs, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    for tag in ("a", "b"):
        await jobs.ok.enqueue(tag)
    await jobs.ok.enqueue_in(3600.0, "later")
    port = free_port()
    log = tmp_path / "exporter.log"
    with exporter(namespace, redis_url, port, log) as process:
        samples = parse(await first_scrape(port, process))
        assert value(samples, "cogworker_up") == 1
        assert value(samples, "cogworker_queue_size", queue="default") == 2
        assert value(samples, "cogworker_scheduled_size") == 1
        assert value(samples, "cogworker_processes") == 0
        # Each scrape reads Redis again.
        await jobs.ok.enqueue("c")
        body = await scraped(port)
        assert body is not None
        assert value(parse(body), "cogworker_queue_size", queue="default") == 3
        assert await stopped(process) == 0
    assert await scraped(port) is None  # the port is closed
    text = log.read_text()
    assert f"serving Prometheus metrics at http://127.0.0.1:{port}/metrics" in text
    assert "SIGTERM: stopping" in text
    assert "Traceback" not in text


async def test_redis_away_is_up_0_and_the_exporter_keeps_serving(
    namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    nobody = f"redis://127.0.0.1:{free_port()}"
    with exporter(namespace, nobody, port, tmp_path / "exporter.log") as process:
        for _ in range(2):
            body = await first_scrape(port, process)
            assert value(parse(body), "cogworker_up") == 0
        assert await stopped(process) == 0
    text = (tmp_path / "exporter.log").read_text()
    assert text.count("reading Redis for the metrics failed") == 1  # once per outage


async def test_a_port_in_use_is_refused_naming_it(namespace: str, redis_url: str,
                                                  tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log = tmp_path / "exporter.log"
        with exporter(namespace, redis_url, port, log) as process:
            code = await anyio.to_thread.run_sync(process.wait, START_TIMEOUT)
    assert code == 2
    [line] = log.read_text().splitlines()
    assert line.startswith("error: cannot serve metrics on 127.0.0.1:")
    assert str(port) in line
    assert "in use" in line
