#!/usr/bin/env python3
"""The dashboard's screenshots in ``docs/screenshots/``, taken afresh (every tab, a
queue's page, a job's page and a dead job's page):

    .venv/bin/python scripts/screenshots.py [--out DIR]

What it starts, and stops by pid at the end (also when a step fails): one private
Redis server on a free port (``tests/servers.py``'s ``ServerProcess``: the tests'
own), ``cogworker-async web`` serving this module's App (``scripts.screenshots:jobs``),
two ``cogworker-async run`` workers of it, and Debian's Chromium (``/usr/bin/chromium``,
never a browser Playwright downloads) through Playwright, 1400 px wide.

The demo data is made the real way: jobs enqueued, run and failed by the workers (the
retry and dead sets), long jobs running with their progress (Busy), a paused queue and
one no worker serves (Queues), scheduled jobs, periodic jobs, limiters, and batches
(two waiting on those queues, one that succeeded, one whose members died). Only the past
is written directly: an hour of run metrics through a worker's own flush
(``Store.flush_stats``), so that the Metrics charts have a history, and the last 30
days' processed and failed counts for the Dashboard's history chart.

Every wait is for a condition, bounded (``WAIT_SECONDS``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: tests.servers and this module import
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from cogworker_async import App, current_job  # noqa: E402

TARGET: Final = "scripts.screenshots:jobs"
URL_ENV: Final = "SCREENSHOTS_REDIS_URL"
NAMESPACE_ENV: Final = "SCREENSHOTS_NAMESPACE"
NAMESPACE: Final = "shop"
OUT: Final = ROOT / "docs" / "screenshots"
CHROMIUM: Final = Path("/usr/bin/chromium")
VIEWPORT: Final = {"width": 1400, "height": 900}
WAIT_SECONDS: Final = 30.0
STOP_SECONDS: Final = 10.0
HOUR: Final = 3600.0
LONG_RUN_SECONDS: Final = 900.0
"""How long the Busy tab's jobs would run: longer than the script takes."""
HISTORY_DAYS: Final = 30

# -- the demo App: configured from the environment in the web and worker processes ----

# No default URL: a copy of this module that was not given one never talks to any Redis
# (it would be the machine's shared one).
jobs = App(os.environ.get(URL_ENV), namespace=os.environ.get(NAMESPACE_ENV, NAMESPACE),
           queues=["default", "media", "emails", "reports"])

transcoders = jobs.limiter("transcoders", concurrent=4)
webhook_calls = jobs.limiter("webhook-calls", per_window=(120, 60.0))
payments_api = jobs.limiter("payments-api", bucket=(20, 1.0))


class GatewayTimeout(Exception):
    """The payment gateway did not answer: worth trying again later."""


@jobs.job(name="emails.send_welcome", queue="default")
async def send_welcome(user_id: int, *, template: str = "welcome-v2") -> None:
    await anyio.sleep(random.uniform(0.01, 0.06))


@jobs.job(name="images.thumbnail", queue="default")
async def thumbnail(path: str, sizes: list[int]) -> None:
    await anyio.sleep(random.uniform(0.02, 0.12))


@jobs.job(name="emails.send_newsletter", queue="emails")
async def send_newsletter(user_id: int, campaign: str) -> None:
    await anyio.sleep(0.02)


@jobs.job(name="emails.send_reminder", queue="emails")
async def send_reminder(user_id: int, reason: str) -> None:
    await anyio.sleep(0.02)


@jobs.job(name="reports.monthly_statement", queue="reports")
async def monthly_statement(account_id: str, month: str, *, format: str = "pdf") -> None:
    await anyio.sleep(0.5)


@jobs.job(name="billing.charge_invoice", queue="default", retry=25,
          retry_in=lambda attempt, error: 1800.0 + 600.0 * attempt)
async def charge_invoice(invoice_id: str, amount_cents: int, currency: str = "EUR") -> None:
    async with payments_api:
        await anyio.sleep(0.05)
        raise GatewayTimeout(f"payments gateway gave no answer within 10 s "
                             f"(invoice {invoice_id}, {amount_cents / 100:.2f} {currency})")


@jobs.job(name="webhooks.deliver", queue="default", retry=False)
async def deliver(url: str, event: dict[str, Any]) -> None:
    async with webhook_calls:
        await anyio.sleep(0.02)
        raise ConnectionRefusedError(f"POST {url}: connection refused "
                                     f"(event {event.get('type')} {event.get('id')})")


@jobs.job(name="exports.customers_csv", queue="default", retry=False)
async def customers_csv(account_id: str, columns: list[str]) -> None:
    missing = [column for column in columns if column not in ("id", "name", "email")]
    if missing:
        raise ValueError(f"no such column in the customers export: {', '.join(missing)}")


@jobs.job(name="ops.notify", queue="default")
async def notify(channel: str, text: str) -> None:
    """The batches' callbacks: a message to a chat channel."""
    await anyio.sleep(0.01)


@jobs.job(name="videos.transcode", queue="media")
async def transcode(video_id: str, profile: str, *, renditions: list[str]) -> None:
    async with transcoders:
        await _steady_progress("frames", 14_400)


@jobs.job(name="search.reindex", queue="default")
async def reindex(index: str, *, batch_size: int = 500) -> None:
    await _steady_progress("documents", 2_000_000)


async def _steady_progress(unit: str, total: int) -> None:
    """Report progress once a second for ``LONG_RUN_SECONDS`` (a head start each, so
    that the bars differ)."""
    began, head_start = time.monotonic(), random.uniform(0.1, 0.6)
    while (spent := time.monotonic() - began) < LONG_RUN_SECONDS:
        done = min(0.99, head_start + spent / LONG_RUN_SECONDS)
        await current_job().set_progress(done, {unit: int(done * total), "of": total})
        await anyio.sleep(1.0)


@jobs.periodic("* * * * * */15", name="monitoring.ping")  # seconds last: every 15 s
async def ping() -> None:
    await anyio.sleep(0.01)


@jobs.periodic("*/15 * * * *", name="maintenance.purge_sessions")
async def purge_sessions() -> None:
    await anyio.sleep(0.01)


@jobs.periodic("0 * * * *", name="billing.sync_exchange_rates")
async def sync_exchange_rates() -> None:
    await anyio.sleep(0.01)


@jobs.periodic("0 3 * * *", name="reports.nightly_digest", queue="reports")
async def nightly_digest() -> None:
    await anyio.sleep(0.01)


# -- the processes it starts ---------------------------------------------------------


class Child:
    """One ``cogworker-async`` subprocess (cwd the repository root, so that this module
    imports as ``scripts.screenshots``), its output in a temporary log; stopped by pid."""

    def __init__(self, name: str, args: list[str], redis_url: str) -> None:
        self.name = name
        env = {key: value for key, value in os.environ.items()
               if key not in ("COGWORKER_REDIS_URL", "COGWORKER_WEB_AUTH")}
        env.update({URL_ENV: redis_url, NAMESPACE_ENV: NAMESPACE, "PYTHONUNBUFFERED": "1"})
        fd, path = tempfile.mkstemp(prefix=f"cogworker-screenshots-{name}-", suffix=".log")
        self.log = Path(path)
        with os.fdopen(fd, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cogworker_async", *args], cwd=ROOT, env=env,
                stdout=log, stderr=subprocess.STDOUT)

    def check(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited ({self.process.returncode}):\n"
                               f"{self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        """SIGTERM (a graceful stop), SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_SECONDS)
        self.log.unlink(missing_ok=True)


async def wait_for(condition: Callable[[], Awaitable[bool]], what: str,
                   children: list[Child]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not await condition():
        for child in children:
            child.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {WAIT_SECONDS:g} s: {what}")
        await asyncio.sleep(0.1)


# -- the data ------------------------------------------------------------------------


async def fill_queues() -> dict[str, str]:
    """What stays to be looked at: waiting queues (one paused), scheduled jobs, long
    jobs running; returns the jids a page is taken of."""
    month = (datetime.now(UTC).replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    # Two batches that wait: their queues are paused (emails) or served by no worker.
    async with jobs.batch("winter-sale newsletter, 1,250 subscribers",
                          on_complete=notify.s("#marketing", "newsletter sent")):
        await send_newsletter.enqueue_many(
            [((40_000 + i, "winter-sale"), {}) for i in range(1_250)])
    async with jobs.batch(f"{month} statements, 48 accounts",
                          on_complete=notify.s("#finance", "statements ready")) as statements:
        await monthly_statement.enqueue_many(
            [((f"acct_{7_000 + i * 37}", month), {"format": "pdf" if i % 3 else "csv"})
             for i in range(48)])
    for minutes, user, reason in ((12, 5_012, "cart-abandoned"), (45, 5_190, "trial-ending"),
                                  (90, 5_233, "cart-abandoned"), (240, 5_377, "renewal"),
                                  (1_440, 5_401, "trial-ending"), (2_880, 5_502, "renewal")):
        await send_reminder.enqueue_in(minutes * 60.0, user, reason)
    for hours, invoice, cents in ((3, "INV-2025-1187", 4_900), (26, "INV-2025-1188", 129_900)):
        await charge_invoice.enqueue_in(hours * HOUR, invoice, cents)
    running = {"statements": statements.bid}
    for video, profile in (("vid_8f2c41", "1080p-h264"), ("vid_91aa07", "4k-hevc"),
                           ("vid_a3d5e2", "720p-h264")):
        jid = await transcode.enqueue(video, profile, renditions=["1080p", "720p", "480p"])
        assert jid is not None
        running.setdefault("transcode", jid)
    await reindex.enqueue("products-2025-12", batch_size=1_000)
    return running


FAILING_INVOICES: Final = (("INV-2025-1042", 12_900), ("INV-2025-1057", 4_900),
                           ("INV-2025-1063", 29_900), ("INV-2025-1071", 89_000))
REFUSED_HOOKS: Final = (("acme-outdoor", "order.paid"), ("nordic-home", "order.refunded"),
                        ("acme-outdoor", "order.shipped"), ("tinyprints", "customer.created"))


async def fail_some() -> list[str]:
    """Jobs the workers run and fail: the retry set (the gateway times out) and dead
    (refused webhooks, a batch of them, an export asking for a column that does not
    exist); and a batch of quick jobs that succeed. Returns the bids of the two batches."""
    for invoice, cents in FAILING_INVOICES:
        await charge_invoice.enqueue(invoice, cents)
    async with jobs.batch("order events to the shops' webhooks",
                          on_death=notify.s("#ops", "a webhook failed for good")) as hooks:
        for shop, event in REFUSED_HOOKS:
            await deliver.enqueue(f"https://hooks.{shop}.example/cogworker",
                                  {"type": event, "id": f"evt_{random.randrange(10**8):08d}"})
    await customers_csv.enqueue("acct_7111", ["id", "name", "email", "vat_number"])
    async with jobs.batch("spring catalogue thumbnails",
                          on_success=notify.s("#catalogue", "thumbnails ready")) as photos:
        await thumbnail.enqueue_many([((f"catalogue/spring-{i:02}.jpg", [256, 1024]), {})
                                      for i in range(24)])
    return [hooks.bid, photos.bid]


async def trickle(seconds: float) -> None:
    """Quick jobs for the workers, a burst every second: the live graph's line."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        count = random.randint(4, 10)
        await send_welcome.enqueue_many([((random.randrange(10**6),), {})
                                         for _ in range(count)])
        await thumbnail.enqueue_many([((f"uploads/{random.randrange(10**6)}.jpg", [64, 256]),
                                       {}) for _ in range(count // 3)])
        await asyncio.sleep(1.0)


RUN_TIMES_MS: Final = {"emails.send_welcome": (40, 25, 420), "images.thumbnail": (120, 60, 140),
                       "reports.monthly_statement": (2_400, 900, 2),
                       "billing.charge_invoice": (380, 150, 12),
                       "webhooks.deliver": (90, 40, 30)}
"""Per job class: mean and spread of its run time (ms), runs a minute (about what
``trickle`` makes now)."""
DAILY_RUNS: Final = (820_000, 260_000, 40_000)
"""Jobs processed on a weekday, on a weekend day, and the spread."""


async def write_history() -> None:
    """The past: an hour of run metrics (as a worker's flush writes them) and 30 days of
    processed and failed counts."""
    from cogworker_async.observe.run_metrics import Tally
    from cogworker_async.redis.stats import HISTORY_TTL, StatsFlush

    store, now, tally, rng = jobs._store(), time.time(), Tally(), random.Random(31)
    for minute in range(60, 0, -1):
        busy = 1.0 + 0.6 * (minute % 20 < 6)  # a busier spell every 20 minutes
        for name, (mean, spread, per_minute) in RUN_TIMES_MS.items():
            for _ in range(max(1, int(rng.gauss(per_minute * busy, per_minute / 4)))):
                seconds = max(1.0, rng.gauss(mean, spread)) / 1000.0
                failed = name == "webhooks.deliver" and rng.random() < 0.08
                tally.add(name, ended_at=now - minute * 60.0, seconds=seconds, failed=failed)
    runs = list(tally.entries.values())
    await store.flush_stats("screenshots:history", StatsFlush(
        1, sum(run.runs for run in runs), sum(run.failed for run in runs), tally.take()))
    async with store.client.pipeline(transaction=False) as pipe:
        for back in range(1, HISTORY_DAYS):
            day = (datetime.now(UTC) - timedelta(days=back)).strftime("%Y-%m-%d")
            weekend = (datetime.now(UTC) - timedelta(days=back)).weekday() >= 5
            weekday_runs, weekend_runs, spread = DAILY_RUNS
            processed = int(rng.gauss(weekend_runs if weekend else weekday_runs, spread))
            pipe.set(store.keys.stats_processed_on(day), processed, ex=HISTORY_TTL)
            pipe.set(store.keys.stats_failed_on(day), int(processed * rng.uniform(0.002, 0.01)),
                     ex=HISTORY_TTL)
        await pipe.execute()


# -- the pictures ----------------------------------------------------------------------


async def take(url: str, out: Path, shown: dict[str, str], children: list[Child]) -> None:
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = await browser.new_page(viewport=VIEWPORT)
            expect.set_options(timeout=WAIT_SECONDS * 1000)

            async def shot(path: str, name: str, ready: str) -> None:
                response = await page.goto(url + path)
                assert response is not None, path
                assert response.status == 200, path
                await expect(page.locator(ready).first).to_be_visible()
                await page.screenshot(path=str(out / f"{name}.png"), full_page=True)
                print(out / f"{name}.png")

            feeding = asyncio.ensure_future(trickle(WAIT_SECONDS))
            try:
                await page.goto(url + "/")
                await page.wait_for_function(RATE_DRAWN, timeout=WAIT_SECONDS * 1000)
            finally:
                feeding.cancel()
            await page.screenshot(path=str(out / "dashboard.png"), full_page=True)
            print(out / "dashboard.png")
            for path, name, ready in SHOTS:
                await shot(path.format(**shown), name, ready)
            await page.goto(url + "/dead")
            await page.locator("tbody a").first.click()
            await expect(page.get_by_role("heading", name="Backtrace")).to_be_visible()
            await page.screenshot(path=str(out / "dead-job.png"), full_page=True)
            print(out / "dead-job.png")
        finally:
            await browser.close()
    for child in children:
        child.check()


RATE_DRAWN: Final = """() => {
    const points = document.querySelector("polyline.processed").getAttribute("points")
        .split(" ").filter(Boolean);
    return points.length >= 8;
}"""
"""The live graph has a few polls' worth of points (one every 2 s)."""
SHOTS: Final = (
    ("/queues", "queues", "tbody tr"),
    ("/queues/reports", "queue-reports", "tbody tr"),
    ("/busy", "busy", "table.jobs-running progress"),
    ("/jobs/{transcode}", "job", "pre[data-json=args]"),
    ("/scheduled", "scheduled", "tbody tr"),
    ("/retries", "retries", "tbody tr"),
    ("/dead", "dead", "tbody tr"),
    ("/batches", "batches", "tbody tr"),
    ("/batches/{statements}", "batch", "ul.members"),
    ("/periodic", "periodic", "tbody tr"),
    ("/limits", "limits", "tbody tr"),
    ("/metrics/jobs", "metrics", "[data-metrics-chart] svg"),
)
"""Each page: its path, its picture's name, what must show before it is taken."""


async def main(out: Path) -> None:
    """Start the server, then the rest (``run``); stop it by pid whatever happens."""
    from tests.servers import ServerProcess

    if not CHROMIUM.exists():
        raise SystemExit(f"no {CHROMIUM}: apt-get install chromium")
    server = ServerProcess().start()
    try:
        # This module again, its App built on that server at import, as in the web and
        # worker processes. Run as a script, this copy's App has no server to work on:
        # every step runs in that one.
        os.environ[URL_ENV], os.environ[NAMESPACE_ENV] = server.url, NAMESPACE
        demo = importlib.import_module("scripts.screenshots")
        await demo.run(server.url, out)
    finally:
        server.cleanup()


async def run(redis_url: str, out: Path) -> None:
    """The dashboard and two workers on ``redis_url``, the data, the pictures; every
    process stopped by pid at the end."""
    from tests.servers import free_port

    assert jobs.redis_url() == redis_url, "run() is for the module built on the server"
    await anyio.Path(out).mkdir(parents=True, exist_ok=True)
    port = free_port()
    children: list[Child] = []
    try:
        children.append(Child("web", ["web", TARGET, "--port", str(port),
                                      "--log-level", "WARNING"], redis_url))
        for concurrency in (8, 4):
            children.append(Child(f"worker-{concurrency}", [
                "run", TARGET, "-q", "default", "-q", "media", "--concurrency",
                str(concurrency), "--log-level", "WARNING"], redis_url))
        shown = await fill(children)
        await take(f"http://127.0.0.1:{port}", out, shown, children)
    finally:
        for child in reversed(children):
            child.stop()
        await jobs.close()


async def fill(children: list[Child]) -> dict[str, str]:
    """Every tab's data (on this module's App): returns the jids pages are taken of."""
    from cogworker_async.admin import Inspector

    inspector = Inspector(jobs)
    await write_history()
    await inspector.queues.pause("emails")
    shown = await fill_queues()
    hooks, photos = await fail_some()

    async def settled() -> bool:
        running = sum(len(process.running) for process in await inspector.processes.all()
                      if process.alive)
        return (await inspector.retries.size() == len(FAILING_INVOICES)
                and await inspector.dead.size() == len(REFUSED_HOOKS) + 1 and running == 4
                and (await jobs.batch_status(hooks)).state == "dead"
                and (await jobs.batch_status(photos)).state == "success")

    await wait_for(settled, "the failing jobs in retry and dead, four jobs running, and "
                            "two batches ended", children)
    return shown


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    asyncio.run(main(parser.parse_args().out.resolve()))
