"""The admin model: read and act on an App's queues, sets, processes and periodic jobs
from a script (the project's ``Sidekiq::Queue``, ``RetrySet``, ``DeadSet``, ``Stats``).
The dashboard (``cogworker_async.web``) and the admin commands (``cogworker-async dead
...``) are its two consumers; this is the API they share.

    from cogworker_async.admin import Inspector
    from app import jobs

    insp = Inspector(jobs)
    print((await insp.stats.totals()).processed, (await insp.queue("default").info()).size)
    page = await insp.dead.page(1)                      # newest first, 25 a page
    for record in page.items:
        print(record.token, record.name, record.error_message)
    done = await insp.dead.retry([page.items[0].token])  # back on its queue now
    print(done.done, done.missing)                       # missing: it was gone already
    await jobs.close()

Every read is bounded (a page, a window, one scan budget). An action names entries by
their ``token`` and finds exactly the entry that was seen, or reports it gone; it never
touches another one. Importing this package needs neither the CLI's libraries (rich,
typer) nor the dashboard's (starlette, jinja2).

Modules: ``api`` (``Inspector`` and the structures it reads: stats, queues, processes,
periodic jobs), ``sets`` (the scheduled, retry and dead sets and their actions),
``batches`` (pages of batches, one's status and members, cancel), ``waiting`` (the
jobs waiting for their parents: counts, a queue's page, what one waits for),
``records`` (the values returned, and tokens), ``cli`` and ``tables`` (the admin
commands, which need rich and typer).
"""

from cogworker_async.admin.api import Inspector, Queue
from cogworker_async.admin.records import (
    DayTotals,
    Done,
    Found,
    JobRecord,
    Page,
    PeriodicInfo,
    ProcessInfo,
    QueueInfo,
    RunningJob,
    Totals,
)
from cogworker_async.admin.sets import DeadSet, JobSet, RetrySet, ScheduledSet

__all__ = [
    "DayTotals",
    "DeadSet",
    "Done",
    "Found",
    "Inspector",
    "JobRecord",
    "JobSet",
    "Page",
    "PeriodicInfo",
    "ProcessInfo",
    "Queue",
    "QueueInfo",
    "RetrySet",
    "RunningJob",
    "ScheduledSet",
    "Totals",
]
