"""Every Redis key name cogworker-async uses, and the only Python that formats one.

A few scripts derive keys inside the slot they were given, from a key passed in
``KEYS`` (``slot .. "prio:"``, ``"group:"``, ``"dep:"``, ``"once:"``: ``_queue.lua`` and
the scripts beside it): those names are not formatted here, but the keys table test
(tests/test_keys_table.py) reads the suffixes the scripts append and holds them to the
same table as the names made here.

The layout is made for Redis Cluster and is the same on a single Redis (one code path).
Every script touches keys of one hash slot only, so every key carries a hash tag (the part
in braces, which alone decides the slot):

- **a queue's slot**, ``<namespace>:{<queue>}:<what>``: everything a job touches from its
  enqueue to its end — the queue's list, its schedule, retry and dead sets, each process's
  in-progress list *for that queue*, that process's liveness as seen by the queue (alive
  marker, last beat, declared-dead mark), orphan counters, the hand-over list, unique
  locks and periodic claims. Every move of a job (enqueue, fetch, settle, promote,
  recover) stays one script on one slot, and different queues land on different shards.
- **the namespace's slot**, ``<namespace>:{<namespace>}:<what>``: what is about the whole
  app — the registries of queues and processes, beat info, stats, the recovery lock and
  the dashboard's records. No script moves a job through these.

docs/design.md ("Keys and slots") gives the argument, script by script; the keys table,
docs/reference/keys.md, lists every key with its type and bound (tests/test_keys_table.py
holds it to the names made here).
"""

from __future__ import annotations

from dataclasses import dataclass

BATCH_SETS = ("pending", "succeeded", "dead", "cancelled", "children", "kids")
"""The sets of a batch after its hash, in the order the batch scripts take them."""

FORBIDDEN_IN_NAMESPACE = "{}"
"""Braces would add a hash tag of their own and put every key in one slot."""


def check_namespace(namespace: str) -> str:
    """``namespace`` if usable in key names; a ValueError saying why otherwise."""
    if not namespace or not isinstance(namespace, str):
        raise ValueError("namespace must be a non-empty string")
    if any(ch in namespace for ch in FORBIDDEN_IN_NAMESPACE):
        raise ValueError(
            f"namespace {namespace!r} contains a brace: keys carry their own hash tags "
            "(one slot per queue, see docs/design.md), so name it without '{' and '}' "
            "(the first key layout advised '{cogworker}' for Redis Cluster: use "
            "'cogworker')")
    return namespace


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for one namespace."""

    namespace: str

    def __post_init__(self) -> None:
        check_namespace(self.namespace)

    # -- the namespace's slot ----------------------------------------------------------

    def _app(self, suffix: str) -> str:
        return f"{self.namespace}:{{{self.namespace}}}:{suffix}"

    @property
    def queues(self) -> str:
        """Set of every queue name enqueued to or served (for the dashboard, recovery and
        the admin): which queue slots hold this app's keys."""
        return self._app("queues")

    @property
    def processes(self) -> str:
        """Set of identities that have beaten: the registry recovery walks."""
        return self._app("processes")

    def process(self, identity: str) -> str:
        """String with a TTL, refreshed by each beat: "this process is alive"."""
        return self._app(f"process:{identity}")

    @property
    def last_beat(self) -> str:
        """Hash identity -> epoch seconds of its last beat; no TTL."""
        return self._app("last_beat")

    @property
    def beats(self) -> str:
        """Hash identity -> its last beat's info (host, pid, queues, memory, loop lag); no
        TTL: what a dead process last said about itself (forensics for recovered jobs)."""
        return self._app("beats")

    @property
    def declared_dead(self) -> str:
        """Set in the namespace's slot that no script writes: the beat script takes one
        per slot (``queue_declared_dead`` is the one that matters)."""
        return self._app("declared_dead")

    @property
    def recoveries(self) -> str:
        """Capped list of recent recoveries (JSON), newest first, for the dashboard."""
        return self._app("recoveries")

    def no_list(self, identity: str) -> str:
        """A list name in the namespace's slot that nothing writes: ``forget.lua``'s
        in-progress list when it forgets a process there (its lists are per queue)."""
        return self._app(f"in_progress:{identity}")

    def workers(self, identity: str) -> str:
        """Hash of what each processor of one process runs (dashboard only, best effort)."""
        return self._app(f"workers:{identity}")

    def limiter(self, name: str, part: str) -> str:
        """A rate limiter's keys (``limits/limiter.py``): in the namespace's slot, beside the
        processes' alive markers, so that a concurrent limiter's script can tell a
        holder whose process is gone and free its slot in the same step."""
        return self._app(f"limit:{name}:{part}")

    @property
    def limiters(self) -> str:
        """Hash limiter name -> its kind and capacity (JSON), written by each worker that
        registers it: what the dashboard and the CLI list."""
        return self._app("limiters")

    @property
    def recovery_lock(self) -> str:
        """Short lock so that one process at a time runs orphan recovery."""
        return self._app("recovery_lock")

    @property
    def stats_processed(self) -> str:
        return self._app("stats:processed")

    @property
    def stats_failed(self) -> str:
        return self._app("stats:failed")

    def stats_processed_on(self, day: str) -> str:
        """Jobs processed on ``day`` (``YYYY-MM-DD``, UTC), for the history graph."""
        return self._app(f"stats:processed:{day}")

    def stats_failed_on(self, day: str) -> str:
        """Jobs failed on ``day`` (``YYYY-MM-DD``, UTC)."""
        return self._app(f"stats:failed:{day}")

    def stats_flushed(self, flusher: str) -> str:
        """The number of the last stats flush applied of ``flusher`` (one run of a
        process: its identity and a random part; ``add_stats.lua``)."""
        return self._app(f"stats:flushed:{flusher}")

    def run_metrics(self, minute: int) -> str:
        """Hash of one minute's runs per job (``observe/run_metrics.py``: fields and retention)."""
        return self._app(f"metrics:{minute}")

    def finished_channel(self, jid: str) -> str:
        """Pub/sub channel on which the end of job ``jid`` is published, for
        ``result()``'s waiters (jobs that keep a result only; not a key)."""
        return self._app(f"finished:{jid}")

    @property
    def wake_channel(self) -> str:
        """Pub/sub channel an enqueue publishes on, so idle workers fetch at once (not a
        key; on a cluster, PUBLISH reaches every node)."""
        return self._app("wake")

    # -- batches (the namespace's slot: a batch's members span queues) -------------------

    def batch(self, bid: str) -> str:
        """Hash of one batch: description, created_at, sealed, state, parent, callbacks
        (JSON), total, fire/fired (callback kinds due, enqueued), finished_at; bounded
        while open (renewed by each add) and kept a while once ended."""
        return self._app(f"batch:{bid}")

    def batch_set(self, bid: str, which: str) -> str:
        """Set of a batch's member jids by where they are (pending, succeeded, dead,
        cancelled), or of its child batches' bids (children: not ended; kids: all);
        bounded as the batch's hash."""
        return self._app(f"batch:{bid}:{which}")

    def batch_keys(self, bid: str) -> list[str]:
        """The seven keys of a batch, in the order the batch scripts take them."""
        return [self.batch(bid), *(self.batch_set(bid, which) for which in BATCH_SETS)]

    @property
    def batches(self) -> str:
        """Zset bid -> created_at of the batches (the dashboard's list); entries older
        than an open batch's bound are trimmed at each open."""
        return self._app("batches")

    @property
    def batches_open(self) -> str:
        """Zset bid -> created_at of the batches not ended (the open-batches gauge):
        left at its end (batch_decide); entries older than an open batch's bound (one
        abandoned inside its block) are trimmed at each open."""
        return self._app("batches_open")

    @property
    def batches_firing(self) -> str:
        """Zset bid -> when: batches with callbacks decided and not yet enqueued, or an
        end not yet told to their parent (the relay's work list)."""
        return self._app("batches_firing")

    @property
    def batches_held(self) -> str:
        """Zset bid -> when: batches a block in a worker process holds open (its token
        names the process): the relay lets go of those whose process is gone
        (``worker/batch_reaper.py``)."""
        return self._app("batches_held")

    @property
    def notes_lock(self) -> str:
        """String lock (owner, with a TTL): the worker relaying the notes of the queues
        it does not serve, one at a time (``worker/notes_relay.py``)."""
        return self._app("notes_lock")

    # -- a queue's slot ----------------------------------------------------------------

    def _queue(self, queue: str, suffix: str) -> str:
        return f"{self.namespace}:{{{queue}}}:{suffix}"

    def queue(self, name: str) -> str:
        """List of jobs waiting on queue ``name``: pushed on the left, fetched on the right."""
        return self._queue(name, "queue")

    def priority_level(self, queue: str, priority: int) -> str:
        """List of the jobs of priority ``priority`` waiting on ``queue``, like its list
        (which holds priority 0: this is that list for 0). Bounded as the queue is: by
        the jobs in it; gone when empty (``lua/_queue.lua``)."""
        return self.queue(queue) if priority == 0 else self._queue(queue, f"prio:{priority}")

    def priority_levels(self, queue: str) -> str:
        """Set of the priorities (not 0) whose lists on ``queue`` may hold jobs: at most 20
        members; the fetch drops a level it finds empty (``lua/fetch.lua``)."""
        return self._queue(queue, "prios")

    def group(self, queue: str, name: str) -> str:
        """List of the jobs of fair group ``name`` waiting on ``queue`` (``jobs/groups.py``):
        bounded by the jobs in it; gone when empty."""
        return self._queue(queue, f"group:{name}")

    def groups(self, queue: str) -> str:
        """Zset of ``queue``'s groups that have jobs waiting, scored by their turn (the
        fetch serves the lowest; "" stands for the jobs without a group): one member per
        group with jobs waiting (``lua/_queue.lua``)."""
        return self._queue(queue, "groups")

    def throttle(self, queue: str, digest: str) -> str:
        """String: a throttle's window (``jobs/dedup.py``), the jid of the enqueue that opened
        it; TTL the window."""
        return self._queue(queue, f"throttle:{digest}")

    def debounce(self, queue: str, digest: str) -> str:
        """Hash: a debounced key's waiting job (jid, raw); TTL past its due time."""
        return self._queue(queue, f"debounce:{digest}")

    def coalesce(self, queue: str, digest: str) -> str:
        """Hash: a coalesced key's latest job (jid, raw, merged, era); TTL the records'
        bound."""
        return self._queue(queue, f"coalesce:{digest}")

    def cleared(self, queue: str) -> str:
        """String: how many times ``queue`` was cleared (``lua/clear_queue.lua``): a
        coalesced key's job from before a clear is gone (``lua/coalesce.lua``); no TTL."""
        return self._queue(queue, "cleared")

    def queue_name_of(self, key: str) -> str:
        """The queue whose list ``key`` is (``queue``'s inverse)."""
        return key[len(self.namespace) + 2:key.index("}", len(self.namespace) + 2)]

    def migrating(self, queue: str) -> str:
        """List of jobs being moved from the first key layout onto ``queue``
        (``migrate-keys``); exists only during a migration, or after one was
        interrupted."""
        return self._queue(queue, "queue:migrating")

    def schedule(self, queue: str) -> str:
        """Zset of ``queue``'s jobs to enqueue at a time (score = epoch seconds)."""
        return self._queue(queue, "schedule")

    def retry(self, queue: str) -> str:
        """Zset of ``queue``'s failed jobs waiting for their next attempt."""
        return self._queue(queue, "retry")

    def dead(self, queue: str) -> str:
        """Zset of ``queue``'s jobs that will not run again unless someone asks (score =
        time of death)."""
        return self._queue(queue, "dead")

    def once(self, queue: str, jid: str) -> str:
        """String marking that a batch's callback or an outbox row's ``jid`` was enqueued
        on ``queue`` (``enqueue.lua``'s mode "2", which refuses it again); TTL the
        records' bound (an outbox row's is cut to a minute or so once the row is deleted)."""
        return self._queue(queue, f"once:{jid}")

    def batch_notes(self, queue: str) -> str:
        """List of "bid<TAB>jid<TAB>end" notes: batch members of ``queue`` that ended,
        written by their settle script (``_record.lua``), dropped once relayed to their
        batch (``batches.py``)."""
        return self._queue(queue, "batch_notes")

    def dep(self, queue: str, jid: str) -> str:
        """Hash: job ``jid`` of ``queue`` waiting for its parents (``after=``): its raw
        job, on_parent_failure, the parents, the parent whose result it takes; deleted
        in the step that releases or ends it (``lua/dep_apply.lua``); no TTL meanwhile:
        it is the job's copy, as a queue's entry is."""
        return self._queue(queue, f"dep:{jid}")

    def dep_pending(self, queue: str, jid: str) -> str:
        """Set of the parents (``<queue>/<jid>``) waiting job ``jid`` has not heard the
        end of; bounded as its ``dep`` hash."""
        return self._queue(queue, f"dep_pending:{jid}")

    def watchers(self, queue: str, jid: str) -> str:
        """Set of the jobs waiting for job ``jid`` of ``queue`` (``after=``), as
        ``[+]<queue>/<jid>`` (``lua/dep_watch.lua``); its members are removed once told
        of its end (``dependencies.py``); no TTL: emptied, it is no key."""
        return self._queue(queue, f"watchers:{jid}")

    def waiting(self, queue: str) -> str:
        """Zset jid -> since: ``queue``'s jobs waiting for their parents (the dashboard's
        and the gauge's count); bounded by the jobs waiting."""
        return self._queue(queue, "waiting")

    def arming(self, queue: str) -> str:
        """Zset jid -> since: waiting jobs whose parents are not all watched yet (the
        enqueuer died between the steps: the relay arms them again)."""
        return self._queue(queue, "arming")

    def dep_keys(self, queue: str, jid: str) -> list[str]:
        """The five keys of a waiting job, in the order the dep scripts take them."""
        return [self.dep(queue, jid), self.dep_pending(queue, jid), self.record(queue, jid),
                self.waiting(queue), self.arming(queue)]

    def in_progress(self, queue: str, identity: str) -> str:
        """List of the jobs one process fetched from ``queue`` and has not settled."""
        return self._queue(queue, f"in_progress:{identity}")

    @property
    def in_progress_pattern(self) -> str:
        """SCAN pattern of every in-progress list of this namespace (all queues)."""
        return f"{self.namespace}:{{*}}:in_progress:*"

    def identity_of_list(self, key: str) -> tuple[str, str]:
        """``(queue, identity)`` of an in-progress list's key."""
        queue = self.queue_name_of(key)
        return queue, key[len(self._queue(queue, "in_progress:")):]

    def queue_identities(self, queue: str) -> str:
        """Set of identities that have beaten to ``queue``'s slot (they may own an
        in-progress list there): the registry recovery walks, per queue."""
        return self._queue(queue, "processes")

    def queue_process(self, queue: str, identity: str) -> str:
        """``process`` as seen by ``queue``'s slot: alive marker with a TTL."""
        return self._queue(queue, f"process:{identity}")

    def queue_last_beat(self, queue: str) -> str:
        """``last_beat`` as seen by ``queue``'s slot."""
        return self._queue(queue, "last_beat")

    def queue_declared_dead(self, queue: str) -> str:
        """Set of identities whose jobs on ``queue`` recovery took: a paused process that
        beats again finds itself here and knows it is a zombie."""
        return self._queue(queue, "declared_dead")

    def queue_prefix(self, queue: str) -> str:
        """The start of every key name in ``queue``'s slot (``fetch.lua`` makes the names
        of the pause flag and of each process's in-progress list from it)."""
        return self._queue(queue, "")

    def paused(self, queue: str) -> str:
        """String present while ``queue`` is paused (when, and by whom): no fetch takes
        from it (``fetch.lua``); enqueues still land. No TTL: it lasts until resumed."""
        return self._queue(queue, "paused")

    def orphanings(self, queue: str, jid: str) -> str:
        """Counter of how often ``jid`` was recovered from a dead process."""
        return self._queue(queue, f"orphanings:{jid}")

    def orphanings_prefix(self, queue: str) -> str:
        return self._queue(queue, "orphanings:")

    def repeat_orphans(self, queue: str) -> str:
        """List of jobs orphaned more than ``max_orphanings`` times, to be filed in dead."""
        return self._queue(queue, "repeat_orphans")

    def unsettled(self, queue: str) -> str:
        """List of ``{set, delay, payload}`` records handed over by a stopping process."""
        return self._queue(queue, "unsettled")

    def unique(self, queue: str, digest: str) -> str:
        """Unique-job lock, owned by a jid (the digest covers the queue)."""
        return self._queue(queue, f"unique:{digest}")

    def record(self, queue: str, jid: str) -> str:
        """Hash: the status record of finished job ``jid`` of ``queue`` (``jobs/status.py``:
        fields, states and TTLs), written by every script that moves the job; the name
        by which scripts know a record in either place (``live_records``)."""
        return self._queue(queue, f"job:{jid}")

    def live_records(self, queue: str) -> str:
        """Hash jid -> the packed status record of each job of ``queue`` that may still
        run (``lua/_record.lua``); a finished job's record is its ``record`` key. Bounded
        by the jobs alive, and by ``lua/sweep_records.lua`` for jobs that vanished."""
        return self._queue(queue, "jobs")

    def record_prefix(self, queue: str) -> str:
        """``record``'s name without the jid (scripts that read jids from payloads)."""
        return self._queue(queue, "job:")

    def cancels(self, queue: str, identity: str) -> str:
        """Set of the jids of ``queue`` that process ``identity`` runs and is asked to
        cancel (``cancel.lua`` adds, the process polls and removes)."""
        return self._queue(queue, f"cancels:{identity}")

    def cancels_prefix(self, queue: str) -> str:
        return self._queue(queue, "cancels:")

    def cron_claimed(self, queue: str) -> str:
        """Hash periodic job name -> the last tick (epoch s) enqueued on ``queue``."""
        return self._queue(queue, "cron:claimed")

    def cron_startup(self, queue: str, name: str) -> str:
        """Lock taken by the first process to start, naming the periodic job's
        ``run_at_startup`` run (``<name>:startup:<holder>``, enqueued once) that every
        process starting within its TTL shares."""
        return self._queue(queue, f"cron:startup:{name}")

    def periodic_running(self, queue: str, name: str) -> str:
        """Lock held (by a jid) while a periodic job runs: runs never overlap."""
        return self._queue(queue, f"cron:running:{name}")
