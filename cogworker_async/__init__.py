"""cogworker-async: an asyncio-native background job worker on Redis.

A job, once enqueued, is never lost; a job that already ran is never silently run again.
"""

from cogworker_async.app import App
from cogworker_async.errors import (
    CogworkerError,
    ConfigurationError,
    EmbeddedServerError,
    InvalidArguments,
    PayloadTooLarge,
    ProcessDied,
    SerializationError,
    UnknownJob,
    UnparseablePayload,
)
from cogworker_async.registry import Enqueuer, JobFunction
from cogworker_async.settings import Settings
from cogworker_async.version import __version__
from cogworker_async.worker.manager import Manager

__all__ = [
    "App",
    "CogworkerError",
    "ConfigurationError",
    "EmbeddedServerError",
    "Enqueuer",
    "InvalidArguments",
    "JobFunction",
    "Manager",
    "PayloadTooLarge",
    "ProcessDied",
    "SerializationError",
    "Settings",
    "UnknownJob",
    "UnparseablePayload",
    "__version__",
]
