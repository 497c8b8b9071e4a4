"""A private Redis Cluster for tests: N masters with R replicas each, stopped by pid.

Cluster support is about what a mock cannot show: MOVED and ASK redirections while a
slot migrates, TRYAGAIN on multi-key commands mid-migration, and a replica taking over
a dead master. So tests get real ``redis-server --cluster-enabled yes`` processes, each
a ServerProcess (tests/servers.py) on its own free port and temp dir, joined with
``redis-cli --cluster create`` (or, where there is no cli — the embedded Valkey binary
ships none — by the commands it sends), and helpers that move a slot or kill a master
the way production does it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import redis
from redis.crc import key_slot

from tests.servers import ServerProcess, free_port, server_binary

HOST: Final = "127.0.0.1"
SLOTS: Final = 16384
FORM_TIMEOUT: Final = 30.0
"""Seconds ``redis-cli --cluster create`` plus agreement of every node may take."""
SETTLE_TIMEOUT: Final = 10.0
"""Seconds every live node may take to agree on a slot's owner after a move."""
MIGRATE_BATCH: Final = 100
MIGRATE_TIMEOUT_MS: Final = 5000
AVOID_PORTS: Final = frozenset({6379, 16379})
"""The machine's shared server and its cluster bus: never ours to bind or touch."""
BAD_FLAGS: Final = frozenset({"fail", "fail?", "handshake", "noaddr"})


def wait_for(
    condition: Callable[[], bool], *, timeout: float = 10.0, every: float = 0.02, what: str = ""
) -> None:
    """Sync twin of tests.waiting.wait_until: return once ``condition()``; fail after ``timeout``.

    A condition that raises a Redis error counts as not met yet: nodes refuse or drop
    connections while they join, fail over or restart.
    """
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis.exceptions.RedisError):
            if condition():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout}s")
        time.sleep(every)


def _text(reply: object) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def cli_binary() -> str | None:
    """The redis-cli that forms the cluster: next to the server binary first, else on PATH;
    None where there is none (the embedded server is a bare valkey-server): the cluster
    is then formed by the commands the cli would send (``_form_by_commands``).
    ``COGWORKER_TEST_CLUSTER_CLI=none`` forces that path."""
    if os.environ.get("COGWORKER_TEST_CLUSTER_CLI") == "none":
        return None
    server_dir = Path(server_binary()).parent
    for name in ("redis-cli", "valkey-cli"):
        candidate = server_dir / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    for name in ("redis-cli", "valkey-cli"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass(frozen=True)
class Node:
    """One line of CLUSTER NODES, as seen by one node."""

    id: str
    port: int
    flags: frozenset[str]
    master_id: str | None

    @classmethod
    def parse(cls, line: str) -> Node:
        fields = line.split()
        address = fields[1].split("@", 1)[0]
        master = fields[3]
        return cls(
            id=fields[0],
            port=int(address.rsplit(":", 1)[1]),
            flags=frozenset(fields[2].split(",")),
            master_id=None if master == "-" else master,
        )

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def healthy(self) -> bool:
        return not self.flags & BAD_FLAGS


class ClusterProcess:
    """``masters`` masters with ``replicas`` replicas each on 127.0.0.1, each node a process.

    Settings, and why:
    - ``cluster-node-timeout`` (ms, default 1000): a dead master is noticed in about a
      second, so a failover test takes seconds, not the production default's 15+.
    - ``cluster-replica-validity-factor 0``: a replica always stands for election, however
      long its link to the master has been down; with the default a replica of a master
      that has been unreachable for a while may refuse and leave the slots uncovered.
    - ``cluster-allow-replica-migration no``: replicas stay with the master they were
      given, so the topology only changes when a test changes it.
    - ``repl-diskless-sync-delay 0``: replicas sync at once instead of after 5 s.
    - ``cluster-port``: the bus port is a free port of its own (the default, port+10000,
      may be taken or past 65535).
    """

    def __init__(self, masters: int = 3, replicas: int = 1, *, node_timeout_ms: int = 1000) -> None:
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        self.master_count = masters
        self.replicas_per_master = replicas
        self.node_timeout_ms = node_timeout_ms
        self.servers: list[ServerProcess] = []

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> ClusterProcess:
        cli = cli_binary()
        try:
            self._start_nodes()
            self._form(cli)
            wait_for(self._formed, timeout=FORM_TIMEOUT, what="cluster formed")
        except BaseException:
            self.cleanup()
            raise
        return self

    def cleanup(self) -> None:
        """Stop every node this cluster started (SIGTERM, SIGKILL after a bound), by pid."""
        for server in self.servers:
            if server.process is not None and server.process.poll() is None:
                server.process.terminate()  # all at once: then each wait is short
        for server in self.servers:
            server.cleanup()
        self.servers = []

    def __enter__(self) -> ClusterProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cleanup()

    def _start_nodes(self) -> None:
        taken: set[int] = set()
        for _ in range(self.master_count * (1 + self.replicas_per_master)):
            server = ServerProcess()
            self.servers.append(server)  # before start: cleanup removes its dir either way
            server.port = _fresh_port(taken)
            server.extra = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(server.dir / "nodes.conf"),
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-port", str(_fresh_port(taken)),
                "--cluster-replica-validity-factor", "0",
                "--cluster-allow-replica-migration", "no",
                "--repl-diskless-sync-delay", "0",
            ]  # fmt: skip
            server.start()

    def _form(self, cli: str | None) -> None:
        if cli is None:
            self._form_by_commands()
            return
        addresses = [f"{HOST}:{server.port}" for server in self.servers]
        args = [cli, "--cluster", "create", *addresses]
        args += ["--cluster-replicas", str(self.replicas_per_master), "--cluster-yes"]
        result = subprocess.run(args, capture_output=True, text=True, timeout=FORM_TIMEOUT)
        if result.returncode != 0:
            output = result.stdout + result.stderr
            raise RuntimeError(f"redis-cli --cluster create failed:\n{output}")

    def _form_by_commands(self) -> None:
        """What ``redis-cli --cluster create`` does: every node meets the first, each
        master takes an even range of the 16384 slots, each replica follows its master."""
        clients = [redis.Redis(host=HOST, port=server.port) for server in self.servers]
        try:
            ids = [_text(client.execute_command("CLUSTER MYID"))  # type: ignore[no-untyped-call]
                   for client in clients]
            buses = [int(_text(client.config_get("cluster-port")["cluster-port"]))
                     for client in clients]
            for server, bus in zip(self.servers[1:], buses[1:], strict=True):
                clients[0].execute_command(  # type: ignore[no-untyped-call]
                    "CLUSTER MEET", HOST, server.port, bus)
            count = self.master_count
            for index, client in enumerate(clients[:count]):
                first = index * SLOTS // count
                last = (index + 1) * SLOTS // count - 1
                client.execute_command(  # type: ignore[no-untyped-call]
                    "CLUSTER ADDSLOTSRANGE", first, last)
            for index, client in enumerate(clients[count:]):
                master = ids[index % count]

                def knows(client: redis.Redis = client, master: str = master) -> bool:
                    nodes = _text(client.execute_command(  # type: ignore[no-untyped-call]
                        "CLUSTER NODES"))
                    return master in nodes
                wait_for(knows, timeout=FORM_TIMEOUT, what="replica meets its master")
                client.execute_command("CLUSTER REPLICATE", master)  # type: ignore[no-untyped-call]
        finally:
            for client in clients:
                client.close()

    def _formed(self) -> bool:
        """Every node knows every node, agrees on the slots, is ok; every replica is synced."""
        total = len(self.servers)
        maps = set()
        for port in self.ports:
            nodes = self._nodes(port)
            if len(nodes) != total or not all(node.healthy for node in nodes):
                return False
            if sum(node.is_master for node in nodes) != self.master_count:
                return False
            if self._info(port, "cluster")["cluster_state"] != "ok":
                return False
            replication = self._info(port, "replication")
            if replication["role"] != "master" and replication["master_link_status"] != "up":
                return False
            maps.add(tuple(self._slot_map(port)))
        return len(maps) == 1

    # -- topology -----------------------------------------------------------------------

    @property
    def ports(self) -> list[int]:
        """Ports of the nodes still running (masters and replicas)."""
        return [
            server.port
            for server in self.servers
            if server.process is not None and server.process.poll() is None
        ]

    @property
    def url(self) -> str:
        """``redis+cluster://`` with the current masters as seed nodes."""
        seeds = ",".join(f"{HOST}:{port}" for _, port in self.masters())
        return f"redis+cluster://{seeds}"

    def masters(self) -> list[tuple[str, int]]:
        """(node id, port) of the live masters, by port, as a live node sees them."""
        return [(n.id, n.port) for n in self._live_view() if n.is_master]

    def replicas(self) -> list[tuple[str, int]]:
        """(node id, port) of the live replicas, by port, as a live node sees them."""
        return [(n.id, n.port) for n in self._live_view() if not n.is_master]

    def node_id(self, port: int) -> str:
        return str(self._call(port, "CLUSTER", "MYID"))

    @staticmethod
    def slot_of(key: str) -> int:
        return int(key_slot(key.encode()))

    def port_of_slot(self, slot: int, *, seen_from: int | None = None) -> int:
        """The port of the master serving ``slot``, as ``seen_from`` (else a live node) sees it."""
        port = self.ports[0] if seen_from is None else seen_from
        for start, end, owner in self._slot_map(port):
            if start <= slot <= end:
                return owner
        raise LookupError(f"slot {slot} is not served (as seen from :{port})")

    def _live_view(self) -> list[Node]:
        live = set(self.ports)
        nodes = self._nodes(self.ports[0])
        return sorted((n for n in nodes if n.port in live and n.healthy), key=lambda n: n.port)

    def _agreed_owner(self, slot: int) -> int | None:
        """The port every live node says serves ``slot``, if they agree and it is live."""
        owners = {self.port_of_slot(slot, seen_from=port) for port in self.ports}
        if len(owners) != 1:
            return None
        (owner,) = owners
        return owner if owner in self.ports else None

    # -- changes ------------------------------------------------------------------------

    def move_slot(self, slot: int, to_port: int) -> None:
        """Live-migrate ``slot`` to the master on ``to_port``, as ``redis-cli --cluster
        reshard`` does per slot; clients writing meanwhile get ASK/TRYAGAIN and retry."""
        source = self.port_of_slot(slot)
        if source == to_port:
            return
        if to_port not in {port for _, port in self.masters()}:
            raise ValueError(f":{to_port} is not a live master")
        source_id, target_id = self.node_id(source), self.node_id(to_port)
        self._call(to_port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        self._call(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        with _client(source, decode=False) as client:  # keys are bytes: any key moves as is
            while keys := client.execute_command(  # type: ignore[no-untyped-call]
                "CLUSTER", "GETKEYSINSLOT", slot, MIGRATE_BATCH
            ):
                try:
                    client.execute_command(  # type: ignore[no-untyped-call]
                        "MIGRATE", HOST, to_port, "", 0, MIGRATE_TIMEOUT_MS, "KEYS", *keys
                    )
                except redis.ResponseError as exc:
                    if "BUSYKEY" not in str(exc):
                        raise
                    # A failed MIGRATE has moved (and deleted here) the keys before the
                    # busy one: those left on both nodes are the busy ones.
                    both = []
                    with _client(to_port, decode=False) as target:
                        for key in keys:  # ASKING: the target only imports the slot yet
                            target.execute_command("ASKING")  # type: ignore[no-untyped-call]
                            if target.execute_command("EXISTS", key) and _here(client, key):  # type: ignore[no-untyped-call]
                                both.append(key)
                    raise AssertionError(f"slot {slot}: keys made on both nodes during the "
                                         f"move (written by a command the source ran after "
                                         f"the key had moved): {both}") from exc
        others = [port for _, port in self.masters() if port not in (to_port, source)]
        for port in [to_port, source, *others]:
            self._call(port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait_for(
            lambda: self._agreed_owner(slot) == to_port,
            timeout=SETTLE_TIMEOUT,
            what=f"every node sees slot {slot} on :{to_port}",
        )

    def kill_master_of_slot(self, slot: int) -> int:
        """SIGKILL the master serving ``slot`` (no goodbye to the cluster); return its port."""
        port = self.port_of_slot(slot)
        self._server(port).kill()
        return port

    def wait_failover(self, slot: int, timeout: float = 30.0) -> int:
        """Wait until every live node agrees a live master serves ``slot`` and is ok; return it."""

        def settled() -> bool:
            if self._agreed_owner(slot) is None:
                return False
            return all(self._info(port, "cluster")["cluster_state"] == "ok" for port in self.ports)

        wait_for(settled, timeout=timeout, every=0.05, what=f"failover of slot {slot}")
        return self.port_of_slot(slot)

    def flushall(self) -> None:
        """Empty every master (replicas follow): for tests that share one cluster."""
        for _, port in self.masters():
            self._call(port, "FLUSHALL")

    # -- talking to one node ------------------------------------------------------------

    def _server(self, port: int) -> ServerProcess:
        for server in self.servers:
            if server.port == port:
                return server
        raise LookupError(f"no node of this cluster on :{port}")

    def _call(self, port: int, *args: Any) -> Any:
        with _client(port) as client:
            return client.execute_command(*args)  # type: ignore[no-untyped-call]

    def _nodes(self, port: int) -> list[Node]:
        text = str(self._call(port, "CLUSTER", "NODES"))
        return [Node.parse(line) for line in text.splitlines() if line.strip()]

    def _info(self, port: int, section: str) -> dict[str, str]:
        """``CLUSTER INFO`` for "cluster", else that INFO section; values as strings."""
        if section == "cluster":
            text = str(self._call(port, "CLUSTER", "INFO"))
            pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
            return {key: value.strip() for key, value in pairs}
        with _client(port) as client:
            return {str(key): str(value) for key, value in client.info(section).items()}

    def _slot_map(self, port: int) -> list[tuple[int, int, int]]:
        """(first slot, last slot, master port) ranges from CLUSTER SLOTS, sorted."""
        ranges = self._call(port, "CLUSTER", "SLOTS")
        return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in ranges)


def _here(client: redis.Redis, key: bytes) -> bool:
    """Whether a migrating slot's source still holds ``key`` (else it answers ASK)."""
    try:
        return bool(client.execute_command("EXISTS", key))  # type: ignore[no-untyped-call]
    except redis.exceptions.AskError:
        return False


@contextlib.contextmanager
def _client(port: int, *, decode: bool = True) -> Iterator[redis.Redis]:
    """A plain connection to one node (no redirections followed), closed after use."""
    client = redis.Redis(
        host=HOST, port=port, decode_responses=decode, socket_connect_timeout=1, socket_timeout=10
    )
    try:
        yield client
    finally:
        client.close()


def _fresh_port(taken: set[int]) -> int:
    """A free port not handed out yet to this cluster, and never the shared 6379/16379."""
    while True:
        port = free_port()
        if port not in taken and port not in AVOID_PORTS:
            taken.add(port)
            return port
