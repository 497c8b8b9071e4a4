"""cogworker-async: an asyncio-native background job worker on Redis.

A job, once enqueued, is never lost; a job that already ran is never silently run again.
"""

from typing import TYPE_CHECKING

from cogworker_async.app import App, Worker
from cogworker_async.enqueue.app_queues import AppQueues
from cogworker_async.enqueue.client import Push
from cogworker_async.enqueue.handles import Enqueuer, JobFunction
from cogworker_async.errors import (
    CogworkerError,
    ConfigurationError,
    EmbeddedServerError,
    InvalidArguments,
    JobCancelled,
    JobFailed,
    JobTimeout,
    LifespanExitFailed,
    LifespanFailed,
    OverLimit,
    PayloadTooLarge,
    ProcessDied,
    ResultNotJSON,
    Retry,
    SerializationError,
    UnknownJob,
    UnparseablePayload,
    WrongTypeKey,
)
from cogworker_async.jobs.after import After
from cogworker_async.jobs.context import JobContext, current_job
from cogworker_async.jobs.dedup import Coalesce, Debounce, Throttle
from cogworker_async.jobs.definition import Delay, JobDefinition, JobOptions, RetryIn, When
from cogworker_async.jobs.groups import Group, GroupKey
from cogworker_async.jobs.keywords import JobKeywords
from cogworker_async.jobs.retries import RetryPolicy
from cogworker_async.jobs.signature import Signature
from cogworker_async.jobs.status import CancelOutcome, JobStatus
from cogworker_async.jobs.unique import Unique, UniqueKey, UniquePolicy
from cogworker_async.limits.limiter import Limiter
from cogworker_async.middleware import ClientMiddleware, Enqueue, ServerMiddleware
from cogworker_async.redis.batches import BatchEnded, HoldLapsed
from cogworker_async.redis.durability import NotDurable
from cogworker_async.redis.pausing import Pause
from cogworker_async.redis.unreachable import RedisUnreachable
from cogworker_async.running import JobDecorator
from cogworker_async.settings import Settings
from cogworker_async.version import __version__
from cogworker_async.worker.hooks import DeathHook, FailureHook
from cogworker_async.worker.observers import Death
from cogworker_async.workflows.app_batches import AppBatches
from cogworker_async.workflows.batch import Batch, BatchStatus
from cogworker_async.workflows.chain import Chain

if TYPE_CHECKING:
    from cogworker_async.admin import Inspector
    from cogworker_async.testing import Testing


def __getattr__(name: str) -> object:
    # The admin API is loaded on first use: a worker never reads it, and its import
    # (the set, stats and limits readers) is a tenth of a worker's start-up.
    if name == "Inspector":
        from cogworker_async.admin import Inspector

        return Inspector
    if name == "Testing":  # the type of ``App.testing``: loaded where tests ask for it
        from cogworker_async.testing import Testing

        return Testing
    raise AttributeError(f"module 'cogworker_async' has no attribute {name!r}")

__all__ = [
    "After",
    "App",
    "AppBatches",
    "AppQueues",
    "Batch",
    "BatchEnded",
    "BatchStatus",
    "CancelOutcome",
    "Chain",
    "ClientMiddleware",
    "Coalesce",
    "CogworkerError",
    "ConfigurationError",
    "Death",
    "DeathHook",
    "Debounce",
    "Delay",
    "EmbeddedServerError",
    "Enqueue",
    "Enqueuer",
    "FailureHook",
    "Group",
    "GroupKey",
    "HoldLapsed",
    "Inspector",
    "InvalidArguments",
    "JobCancelled",
    "JobContext",
    "JobDecorator",
    "JobDefinition",
    "JobFailed",
    "JobFunction",
    "JobKeywords",
    "JobOptions",
    "JobStatus",
    "JobTimeout",
    "LifespanExitFailed",
    "LifespanFailed",
    "Limiter",
    "NotDurable",
    "OverLimit",
    "Pause",
    "PayloadTooLarge",
    "ProcessDied",
    "Push",
    "RedisUnreachable",
    "ResultNotJSON",
    "Retry",
    "RetryIn",
    "RetryPolicy",
    "SerializationError",
    "ServerMiddleware",
    "Settings",
    "Signature",
    "Testing",
    "Throttle",
    "Unique",
    "UniqueKey",
    "UniquePolicy",
    "UnknownJob",
    "UnparseablePayload",
    "When",
    "Worker",
    "WrongTypeKey",
    "__version__",
    "current_job",
]
