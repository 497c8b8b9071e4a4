"""A private Redis Sentinel topology for tests: a master, one replica, three sentinels.

What ``redis+sentinel://`` support has to survive is what a mock cannot show: the
sentinels agreeing that the master is down, electing a leader, promoting the replica
(``REPLICAOF NO ONE``) and, seconds later, demoting the old master; clients that were
connected to it meanwhile keep talking to a server that is still a writable master,
then get READONLY or lose their connection. So tests get real processes: each data
node a ServerProcess (tests/servers.py) on its own free port and temp dir, each sentinel
``redis-server <conf> --sentinel`` (the embedded Valkey binary has the same mode) on
its own free port with its config file in its own temp dir (sentinels rewrite it).

Settings, and why:
- ``down-after-milliseconds 1000``: a dead master is noticed in about a second, so a
  kill test takes seconds, not the production default's 30+.
- ``failover-timeout 2000``: a failover whose election split the votes is tried again
  after 2 x 2 s instead of 2 x 3 minutes.
- ``parallel-syncs 1``: one replica resyncs at a time (there is one).
- ``repl-diskless-sync-delay 0``: the replica (and a demoted master) syncs at once
  instead of after 5 s.
- quorum 2 of 3: one sentinel alone never decides.

Every process is stopped by pid at ``cleanup``; their temp dirs are removed.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import redis

from tests.cluster_harness import wait_for
from tests.servers import ServerProcess, free_port, server_binary

HOST: Final = "127.0.0.1"
SERVICE: Final = "cogworker"
"""The name the sentinels monitor the master under (the URL's path)."""
QUORUM: Final = 2
SENTINELS: Final = 3
DOWN_AFTER_MS: Final = 1000
FAILOVER_TIMEOUT_MS: Final = 2000
START_TIMEOUT: Final = 15.0
"""Seconds a sentinel process may take to answer PING."""
DISCOVERY_TIMEOUT: Final = 30.0
"""Seconds every sentinel may take to see the master, the replica and the other
sentinels (they announce themselves on the master's hello channel every 2 s)."""
FAILOVER_WAIT: Final = 30.0
"""Seconds a failover (manual, or after a kill: detection, election, promotion) may
take until the new master is agreed and answers ROLE master."""
DEMOTION_WAIT: Final = 30.0
"""Seconds the sentinels may take to turn a still-running old master into a replica of
the new one: they wait about 8 s (4 hello periods) before they reconfigure it."""
MAXMEMORY: Final = "256mb"
"""A bound on each data node's memory: a runaway test is refused writes, never the
machine's memory (the default ``noeviction`` policy refuses rather than drops)."""
AVOID_PORTS: Final = frozenset({6379, 26379})
"""The machine's shared server and its default sentinel port: never ours."""


class SentinelProcess:
    """One ``redis-server <conf> --sentinel`` on 127.0.0.1:<free port>, its config and
    log in its own temp dir."""

    def __init__(self, port: int, master_port: int) -> None:
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix="cogworker-test-sentinel-"))
        self.config = self.dir / "sentinel.conf"
        self.config.write_text("\n".join([
            f"port {port}",
            f"bind {HOST}",
            "daemonize no",
            f"dir {self.dir}",
            f"logfile {self.dir / 'sentinel.log'}",
            f"sentinel monitor {SERVICE} {HOST} {master_port} {QUORUM}",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1",
            "",
        ]))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SentinelProcess:
        self.process = subprocess.Popen([server_binary(), str(self.config), "--sentinel"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        process = self.process

        def answers() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"sentinel exited: see {self.dir / 'sentinel.log'}")
            with _client(self.port) as client:
                return bool(client.ping())

        wait_for(answers, timeout=START_TIMEOUT, what=f"sentinel :{self.port} answers")
        return self

    def log(self) -> str:
        try:
            return (self.dir / "sentinel.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def cleanup(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelTopology:
    """A master, one replica and three sentinels on 127.0.0.1, each a process.

    ``url`` is the ``redis+sentinel://`` URL of the service; ``failover()`` and
    ``kill_master()`` move the master the way production does; ``master_port()`` is
    where the sentinels say it is now.
    """

    def __init__(self) -> None:
        self.servers: list[ServerProcess] = []
        self.sentinels: list[SentinelProcess] = []
        self._taken: set[int] = set()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> SentinelTopology:
        try:
            master = self._start_server()
            self._start_server(replica_of=master.port)
            wait_for(lambda: self._linked(self.servers[1].port), timeout=DISCOVERY_TIMEOUT,
                     what="replica in sync with the master")
            for _ in range(SENTINELS):
                sentinel = SentinelProcess(self._fresh_port(), master.port)
                self.sentinels.append(sentinel)  # before start: cleanup removes its dir
                sentinel.start()
            wait_for(lambda: self._discovered(master.port), timeout=DISCOVERY_TIMEOUT,
                     every=0.1, what="every sentinel sees the master, replica and sentinels")
        except BaseException:
            self.cleanup()
            raise
        return self

    def cleanup(self) -> None:
        """Stop every process this topology started (SIGTERM, SIGKILL after a bound), by
        pid, and remove their temp dirs. Sentinels first: they would otherwise notice
        the master going and fail it over while it stops."""
        for process in [s.process for s in self.sentinels] + [s.process for s in self.servers]:
            if process is not None and process.poll() is None:
                process.terminate()  # all at once: then each wait is short
        for sentinel in self.sentinels:
            sentinel.cleanup()
        for server in self.servers:
            server.cleanup()
        self.sentinels, self.servers = [], []

    def __enter__(self) -> SentinelTopology:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.cleanup()

    def _start_server(self, *, replica_of: int | None = None) -> ServerProcess:
        server = ServerProcess()
        self.servers.append(server)  # before start: cleanup removes its dir either way
        server.port = self._fresh_port()
        server.extra = _server_options(replica_of)
        return server.start()

    def _fresh_port(self) -> int:
        """A free port not handed out yet to this topology, never the shared ones."""
        while True:
            port = free_port()
            if port not in self._taken and port not in AVOID_PORTS:
                self._taken.add(port)
                return port

    # -- topology -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``redis+sentinel://`` naming the three sentinels and the service."""
        seeds = ",".join(f"{HOST}:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{seeds}/{SERVICE}"

    def master_port(self) -> int:
        """The master's port, as every running sentinel agrees (AssertionError if they
        do not agree within a bound: call it once the topology is settled)."""
        found: list[int] = []

        def agreed() -> bool:
            ports = {self._master_as_seen_by(s.port) for s in self._live_sentinels()}
            if len(ports) != 1:
                return False
            found[:] = list(ports)
            return True

        wait_for(agreed, timeout=FAILOVER_WAIT, what="sentinels agree on the master")
        return found[0]

    def server(self, port: int) -> ServerProcess:
        for server in self.servers:
            if server.port == port:
                return server
        raise LookupError(f"no data node of this topology on :{port}")

    def role(self, port: int) -> str:
        """``"master"``, ``"slave"`` (ROLE's own word for a replica) or ``"down"``."""
        try:
            with _client(port) as client:
                reply = client.execute_command("ROLE")  # type: ignore[no-untyped-call]
        except redis.exceptions.RedisError:
            return "down"
        return _text(reply[0])

    def info(self, port: int, section: str) -> dict[str, Any]:
        with _client(port) as client:
            return dict(client.info(section))

    def client(self, port: int) -> redis.Redis:
        """A plain blocking client of one data node (the caller closes it)."""
        return redis.Redis(host=HOST, port=port, socket_connect_timeout=1, socket_timeout=10)

    # -- changes ------------------------------------------------------------------------

    def failover(self) -> tuple[int, int]:
        """``SENTINEL FAILOVER``: promote the replica with the master still up; wait until
        every sentinel names the new master and it answers ROLE master. Returns (old
        master's port, new master's port). The old master is demoted by the sentinels a
        few seconds later (``wait_demoted``)."""
        old = self.master_port()
        with _client(self.sentinels[0].port) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)  # type: ignore[no-untyped-call]
        return old, self._wait_promoted(old)

    def kill_master(self) -> tuple[int, int]:
        """SIGKILL the master by pid (no goodbye) and wait until the sentinels have
        promoted the replica and it answers ROLE master. Returns (old port, new port)."""
        old = self.master_port()
        self.server(old).kill()
        return old, self._wait_promoted(old)

    def wait_demoted(self, port: int, timeout: float = DEMOTION_WAIT) -> None:
        """Wait until the node on ``port`` is a replica of the current master and in sync."""
        master = self.master_port()

        def demoted() -> bool:
            replication = self.info(port, "replication")
            return (replication["role"] == "slave"
                    and int(replication["master_port"]) == master
                    and replication["master_link_status"] == "up")

        wait_for(demoted, timeout=timeout, every=0.05, what=f":{port} demoted to replica")

    def restart_old_master_as_replica(self, port: int) -> None:
        """Start the killed node on ``port`` again, as a replica of the current master
        (as an operator would), and wait until it is in sync: a write confirmed by
        ``WAIT 1`` is on it. ``wait_known`` waits for the sentinels to list it too."""
        master = self.master_port()
        server = self.server(port)
        server.extra = _server_options(master)
        server.start()
        wait_for(lambda: self._linked(port), timeout=DISCOVERY_TIMEOUT,
                 what=f":{port} in sync with the new master")

    def wait_known(self) -> None:
        """Wait until every sentinel sees the master, every running data node as a
        healthy replica and the other sentinels (their view of a replica is refreshed
        every 10 s): the topology can fail over again."""
        master = self.master_port()
        try:
            wait_for(lambda: self._discovered(master), timeout=DISCOVERY_TIMEOUT, every=0.1,
                     what="every sentinel sees every replica")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the sentinels see: {self.views()}") from None

    def _wait_promoted(self, old: int) -> int:
        found: list[int] = []

        def promoted() -> bool:
            ports = {self._master_as_seen_by(s.port) for s in self._live_sentinels()}
            if len(ports) != 1 or old in ports:
                return False
            (port,) = ports
            if self.role(port) != "master":
                return False
            found.append(port)
            return True

        wait_for(promoted, timeout=FAILOVER_WAIT, every=0.05,
                 what=f"a new master instead of :{old}")
        return found[-1]

    # -- what the sentinels say ---------------------------------------------------------

    def _live_sentinels(self) -> list[SentinelProcess]:
        return [s for s in self.sentinels if s.process is not None and s.process.poll() is None]

    def _master_as_seen_by(self, sentinel_port: int) -> int:
        with _client(sentinel_port) as sentinel:
            _, port = sentinel.execute_command(  # type: ignore[no-untyped-call]
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(port)

    def _discovered(self, master_port: int) -> bool:
        """Every sentinel sees ``master_port`` as a healthy master, every live data node
        but it as a healthy, linked replica, and the other sentinels."""
        replicas = {s.port for s in self.servers if s.process is not None} - {master_port}
        for sentinel in self._live_sentinels():
            with _client(sentinel.port) as client:
                master = _pairs(client.execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "MASTER", SERVICE))
                seen = [_pairs(r) for r in client.execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "REPLICAS", SERVICE)]
                others = client.execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "SENTINELS", SERVICE)
            if int(master["port"]) != master_port or master["flags"] != "master":
                return False
            healthy = {int(r["port"]) for r in seen
                       if r["flags"] == "slave" and r.get("master-link-status") == "ok"}
            if not replicas <= healthy or len(others) != SENTINELS - 1:
                return False
        return True

    def views(self) -> list[dict[str, Any]]:
        """What each live sentinel says of the master, the replicas and the other
        sentinels (for failure messages)."""
        found = []
        for sentinel in self._live_sentinels():
            try:
                with _client(sentinel.port) as client:
                    master = _pairs(client.execute_command(  # type: ignore[no-untyped-call]
                        "SENTINEL", "MASTER", SERVICE))
                    replicas = [_pairs(r) for r in client.execute_command(  # type: ignore[no-untyped-call]
                        "SENTINEL", "REPLICAS", SERVICE)]
                    others = client.execute_command(  # type: ignore[no-untyped-call]
                        "SENTINEL", "SENTINELS", SERVICE)
            except redis.exceptions.RedisError as exc:
                found.append({"sentinel": sentinel.port, "error": str(exc)})
                continue
            found.append({
                "sentinel": sentinel.port,
                "master": (master.get("port"), master.get("flags")),
                "replicas": [(r.get("port"), r.get("flags"), r.get("master-link-status"))
                             for r in replicas],
                "sentinels": len(others),
            })
        return found

    def _linked(self, port: int) -> bool:
        replication = self.info(port, "replication")
        return bool(replication["role"] == "slave"
                    and replication["master_link_status"] == "up")


def _server_options(replica_of: int | None) -> list[str]:
    options = ["--repl-diskless-sync-delay", "0", "--maxmemory", MAXMEMORY]
    if replica_of is not None:
        options += ["--replicaof", HOST, str(replica_of)]
    return options


@contextlib.contextmanager
def _client(port: int) -> Iterator[redis.Redis]:
    """A plain decoded connection to one node or sentinel, closed after use."""
    client = redis.Redis(host=HOST, port=port, decode_responses=True,
                         socket_connect_timeout=1, socket_timeout=10)
    try:
        yield client
    finally:
        client.close()


def _pairs(reply: Any) -> dict[str, str]:
    """A sentinel's flat [name, value, name, value, ...] reply (or RESP3 map) as a dict."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    items = list(reply)
    return {str(items[i]): str(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _text(reply: object) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)

