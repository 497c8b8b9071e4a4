# Checked by mypy in tests/enqueue/test_typing.py, not collected by pytest.
from cogworker_async import App

jobs = App("redis://localhost")


@jobs.job(retry=5)
async def send_email(to: str, subject: str = "") -> None: ...


async def main() -> None:
    await send_email.enqueue("a@example.com", subject="hi")
    await send_email.enqueue(42)
    await send_email.enqueue_in(30, "a@example.com", subjet="typo")
    await send_email.options(queue="critical").enqueue()
