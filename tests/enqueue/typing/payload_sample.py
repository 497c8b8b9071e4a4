# Checked by mypy in tests/enqueue/test_typing.py, not collected by pytest.
from cogworker_async import JobContext
from cogworker_async.jobs import wire
from cogworker_async.middleware import Enqueue, EnqueueNext


def fields(payload: wire.Payload) -> None:
    payload["queue"] = "emails"
    payload["qeue"] = "emails"
    wire.number(payload, "enqueued_at")
    wire.number(payload, "enqued_at")


async def tag_tenant(enqueue: Enqueue, call_next: EnqueueNext) -> str | None:
    enqueue.payload["tenant"] = "acme"  # middleware adds fields of its own
    return await call_next(enqueue)


def read_tenant(context: JobContext) -> object:
    return context.payload["tenant"]
