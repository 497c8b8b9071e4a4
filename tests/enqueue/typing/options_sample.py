# Checked by mypy in tests/enqueue/test_typing.py, not collected by pytest.
from cogworker_async import After, App, Coalesce, Debounce, Group, RetryPolicy, Throttle, Unique

jobs = App("redis://localhost")


@jobs.job(dedup=Unique(ttl=60, key=lambda to: to), retry=RetryPolicy(max=3, delay=5.0),
          group=Group(lambda to: to, limit=2), after=After(on_failure="run"))
async def send_email(to: str) -> None: ...


@jobs.job(unique=True, unique_ttl=60, retry=3, retry_in=lambda attempt, error: 1.0,
          discard_on=[KeyError], group="tenant", throttle=5, key="k", expires_at=1e10)
async def flat(to: str) -> None: ...


async def main() -> None:
    await send_email.options(dedup=Throttle(5, key="k")).enqueue("a@example.com")
    await send_email.options(dedup=Debounce(5), after=["j1"], jid="x").enqueue("b")
    await send_email.options(dedup=Coalesce(), retry=RetryPolicy(max=1)).enqueue("c")
    await send_email.options(after=After(["j1"], pass_result=True), group="g").enqueue("d")
    await send_email.options(dedup=5).enqueue("e")
    await send_email.options(retry="often").enqueue("f")
    await send_email.options(after=After(["j1"], on_failure="ignore")).enqueue("g")
    await send_email.options(grup="g").enqueue("h")
    await send_email.options(dedup=Throttle(5)).enqueue(42)


@jobs.job(jid="one")
async def no_jid() -> None: ...
