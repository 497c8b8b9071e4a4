"""RQ (synchronous): ``Queue.enqueue``, ``Queue.enqueue_many`` (one pipeline) and a
``SimpleWorker`` (jobs run in the worker process, one at a time: RQ's default ``Worker``
forks a process per job). ``rq worker -w rq.worker.SimpleWorker`` (``cli_workers.py``)
imports the jobs from this module as ``rq_peer``. No event loop, so no uvloop;
``--concurrency`` must be 1, and the sleep scenario is left out (2,000 x 50 ms one at a
time is 100 s by construction).
"""

from __future__ import annotations

import resource
import signal
import sys
import time

import common
from redis import Redis
from rq import Queue, SimpleWorker

WORKER: SimpleWorker | None = None
DEADLINE = float("inf")


def _hit(ts: float, *, record: bool = False) -> None:
    common.TRACKER.hit(ts, record=record)
    if time.perf_counter() > DEADLINE and WORKER is not None:
        WORKER.request_stop(signal.SIGTERM, None)  # time cap: stop after this job


def noop(ts: float) -> None:
    _hit(ts)


def sleep(ts: float) -> None:
    time.sleep(common.TRACKER.sleep_s)
    _hit(ts)


def probe(ts: float) -> None:
    _hit(ts, record=True)


def main() -> None:
    global WORKER, DEADLINE
    args = common.parse_args()
    connection = Redis.from_url(args.redis_url)
    queue = Queue("default", connection=connection)
    if args.command == "enqueue":
        began, cpu = time.perf_counter(), common.cpu_seconds()
        deadline = began + args.max_seconds
        done = 0
        for _ in range(args.n):
            queue.enqueue(f"rq_peer.{args.job}", time.time())
            done += 1
            if args.interval:
                time.sleep(args.interval)
            if time.perf_counter() > deadline:
                break
        common.emit("result", n=done, seconds=time.perf_counter() - began,
                    cpu=common.cpu_seconds() - cpu, capped=done < args.n)
    elif args.command == "enqueue-bulk":
        began, cpu = time.perf_counter(), common.cpu_seconds()
        deadline = began + args.max_seconds
        done = 0
        while done < args.n and time.perf_counter() < deadline:
            size = min(args.chunk, args.n - done)
            now = time.time()
            queue.enqueue_many([Queue.prepare_data(f"rq_peer.{args.job}", (now,))
                                for _ in range(size)])
            done += size
        common.emit("result", n=done, seconds=time.perf_counter() - began,
                    cpu=common.cpu_seconds() - cpu, method="enqueue_many",
                    capped=done < args.n)
    else:
        if args.concurrency != 1:
            raise SystemExit("rq: a SimpleWorker runs one job at a time (--concurrency 1)")
        common.TRACKER.sleep_s = args.sleep_ms / 1000
        worker = WORKER = SimpleWorker([queue], connection=connection)
        began, cpu = time.perf_counter(), common.cpu_seconds()
        DEADLINE = began + args.max_seconds
        common.emit("ready")
        worker.work(burst=False, max_jobs=args.n, logging_level="WARNING")
        tracker = common.TRACKER
        usage = resource.getrusage(resource.RUSAGE_SELF)
        first = None if tracker.first_at is None else tracker.first_at - began
        span = None if tracker.first_at is None or tracker.last_at is None \
            else tracker.last_at - tracker.first_at
        common.emit("result", n=tracker.count, seconds=time.perf_counter() - began,
                    cpu=common.cpu_seconds() - cpu, first_job=first, span=span,
                    rss_kb=common.rss_kb(), maxrss_kb=usage.ru_maxrss,
                    latencies=tracker.latencies, capped=tracker.count < args.n)
        common.emit("stopped")
    sys.stdout.flush()


if __name__ == "__main__":
    # The worker imports jobs as ``rq_peer.<name>``: make that this very module, so the
    # jobs and this script share one tracker.
    sys.modules.setdefault("rq_peer", sys.modules[__name__])
    main()
