"""Testing helpers for users' own tests: ``jobs.testing`` (no Redis needed).

- ``with jobs.testing.fake():`` (or ``async with``): enqueues are recorded in memory,
  checked exactly as real ones (they are the real client path up to the push);
  ``jobs.testing.enqueued(job=..., queue=...)`` lists them; ``await jobs.testing.drain()``
  runs them, and what they enqueue, through the worker's own processor, and returns the
  runs (``Run.outcome``: succeeded, retried, dead, discarded, cancelled, expired, limited).
- ``with jobs.testing.inline():``: each enqueue runs its job at once; errors propagate.
- What the fake does not claim raises ``NotFaked`` (``pause``, a limiter entered outside
  a job, the admin reads: they need Redis; an order priority aging would change).
- A pytest plugin (``cogworker_async_pytest``, a top-level module): the ``cogworker_fake`` and
  ``cogworker_inline`` fixtures.

``harness.py`` holds ``Testing``; ``world.py`` the jobs; ``drain.py`` the worker with no
Redis; ``memory.py`` the locks and limiter decisions it needs; ``batches.py`` and
``dependencies.py`` what the relay does for batches and for jobs run after others.
"""

from cogworker_async.testing.harness import MAX_INLINE_DEPTH, MAX_RUNS, Mode, Testing
from cogworker_async.testing.records import Enqueued, NotFaked, Run, TooManyRuns

__all__ = ["MAX_INLINE_DEPTH", "MAX_RUNS", "Enqueued", "Mode", "NotFaked", "Run", "Testing",
           "TooManyRuns"]
