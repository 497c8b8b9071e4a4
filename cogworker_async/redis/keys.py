"""Every Redis key name cogworker-async uses, and the only place one is formatted.

Every name is ``<namespace>:<what>`` (namespace ``cogworker`` unless configured); the
README's keys table lists them all with their types and bounds.
On Redis Cluster, give the namespace a hash tag (``"{cogworker}"``) so that every key
of one app shares a slot: each script touches several of them at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for one namespace."""

    namespace: str

    def _key(self, suffix: str) -> str:
        return f"{self.namespace}:{suffix}"

    def queue(self, name: str) -> str:
        """List of jobs waiting on queue ``name``: pushed on the left, fetched on the right."""
        return self._key(f"queue:{name}")

    @property
    def queue_prefix(self) -> str:
        return self._key("queue:")

    @property
    def queues(self) -> str:
        """Set of every queue name ever enqueued to (for the dashboard and admin)."""
        return self._key("queues")

    @property
    def schedule(self) -> str:
        """Zset of jobs to enqueue at a time (score = epoch seconds)."""
        return self._key("schedule")

    @property
    def retry(self) -> str:
        """Zset of failed jobs waiting for their next attempt."""
        return self._key("retry")

    @property
    def dead(self) -> str:
        """Zset of jobs that will not run again unless someone asks (score = time of death)."""
        return self._key("dead")

    def in_progress(self, identity: str) -> str:
        """List of the jobs one process fetched and has not settled (reliable fetch)."""
        return self._key(f"in_progress:{identity}")

    @property
    def in_progress_prefix(self) -> str:
        return self._key("in_progress:")

    @property
    def in_progress_identities(self) -> str:
        """Set of identities that own an in-progress list: the registry recovery walks."""
        return self._key("in_progress_identities")

    def process(self, identity: str) -> str:
        """String with a TTL, refreshed by each beat: "this process is alive"."""
        return self._key(f"process:{identity}")

    @property
    def last_beat(self) -> str:
        """Hash identity -> epoch seconds of its last beat; no TTL."""
        return self._key("last_beat")

    @property
    def beats(self) -> str:
        """Hash identity -> its last beat's info (host, pid, memory, loop lag); no TTL:
        what a dead process last said about itself (forensics for recovered jobs)."""
        return self._key("beats")

    @property
    def declared_dead(self) -> str:
        """Set of identities whose jobs recovery took: a paused process that beats again
        finds itself here and knows it is a zombie."""
        return self._key("declared_dead")

    @property
    def recoveries(self) -> str:
        """Capped list of recent recoveries (JSON), newest first, for the dashboard."""
        return self._key("recoveries")

    def workers(self, identity: str) -> str:
        """Hash of what each processor of one process runs (dashboard only, best effort)."""
        return self._key(f"workers:{identity}")

    def orphanings(self, jid: str) -> str:
        """Counter of how often ``jid`` was recovered from a dead process."""
        return self._key(f"orphanings:{jid}")

    @property
    def orphanings_prefix(self) -> str:
        return self._key("orphanings:")

    @property
    def repeat_orphans(self) -> str:
        """List of jobs orphaned more than ``max_orphanings`` times, to be filed in dead."""
        return self._key("repeat_orphans")

    @property
    def unsettled(self) -> str:
        """List of ``{set, score, payload}`` records handed over by a stopping process."""
        return self._key("unsettled")

    @property
    def recovery_lock(self) -> str:
        """Short lock so that one process at a time runs orphan recovery."""
        return self._key("recovery_lock")

    @property
    def stats_processed(self) -> str:
        return self._key("stats:processed")

    @property
    def stats_failed(self) -> str:
        return self._key("stats:failed")

    def stats_processed_on(self, day: str) -> str:
        """Jobs processed on ``day`` (``YYYY-MM-DD``, UTC), for the history graph."""
        return self._key(f"stats:processed:{day}")

    def stats_failed_on(self, day: str) -> str:
        """Jobs failed on ``day`` (``YYYY-MM-DD``, UTC)."""
        return self._key(f"stats:failed:{day}")

    @property
    def wake_channel(self) -> str:
        """Pub/sub channel an enqueue publishes on, so idle workers fetch at once."""
        return self._key("wake")

    @property
    def cron_claimed(self) -> str:
        """Hash periodic job name -> the last tick (epoch s) enqueued for it."""
        return self._key("cron:claimed")

    def periodic_running(self, name: str) -> str:
        """Lock held (by a jid) while a periodic job runs: runs never overlap."""
        return self._key(f"cron:running:{name}")

    def unique(self, digest: str) -> str:
        """Unique-job lock, owned by a jid."""
        return self._key(f"unique:{digest}")
