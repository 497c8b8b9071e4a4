"""A network lab of Linux network namespaces: real TCP links that a test can cut.

Topology (one ``Lab`` per test): namespace ``srv`` holds the private redis-server; each
*peer* namespace (a worker, an enqueuer) has its own veth pair to ``srv``, the link that
gets faulted; a *control* veth pair joins the root namespace (the test process) to
``srv`` and is never faulted, so the test can always enqueue, read and count.

Faults are nftables rules on the *ingress* hook of the receiving device at each end of a
peer's link (a ``netdev`` table in the peer's namespace and in ``srv``): a packet dropped
there has left the sender — its TCP counts it in flight and retransmits it — and is
lost on the wire, as in a real partition (a drop on the sender's own output hook would
happen inside the sender's stack instead). Nothing is ever installed in the root
namespace's netfilter, and no address leaves the machine: every link is a /30 out of
one /24 of 10.64.0.0/10 that no route of the root namespace covers.

Names carry the creating process's pid (``cw<pid><letter>-<role>`` namespaces,
``cw<pid><letter>{s,p}<n>`` devices), so parallel runs never collide, and
``clean_leftovers()`` removes what a crashed run left (its pid dead) and nothing else.
Processes started in a namespace get SIGKILL when the test process dies
(``PR_SET_PDEATHSIG``): a crash leaves no redis-server or worker running.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import itertools
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import redis

from tests.servers import server_binary

PREFIX: Final = "cw"
REDIS_PORT: Final = 6390
"""redis-server's port inside ``srv`` (its own namespace: no other server can hold it)."""
TABLE: Final = "cw_chaos"
"""The nftables ``netdev`` table of each lab namespace (never one of the root's)."""
COMMAND_TIMEOUT: Final = 15.0
"""Seconds an ``ip`` or ``nft`` command may take."""
START_TIMEOUT: Final = 15.0
"""Seconds the lab's redis-server may take to answer its first PING."""
STOP_TIMEOUT: Final = 10.0
"""Seconds a killed process may take to be reaped."""
SUPERNET: Final = ipaddress.IPv4Network("10.64.0.0/10")
"""Private range the labs' /24s are taken from."""
MAX_LINKS: Final = 63
"""/30s in a lab's /24."""
PR_SET_PDEATHSIG: Final = 1

_NS_NAME: Final = re.compile(rf"^{PREFIX}(\d+)[a-z]-")
_DEV_NAME: Final = re.compile(rf"^{PREFIX}(\d+)[a-z][sp]\d+$")
_labs = itertools.count()


class LabError(RuntimeError):
    """An ``ip`` or ``nft`` command failed."""


def run(*argv: str, stdin: str | None = None) -> str:
    """Run a command to completion; its stdout, or LabError with its stderr."""
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, check=False)
    if done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def in_ns(ns: str, *argv: str) -> list[str]:
    """``argv`` run inside namespace ``ns`` (root: ``ns`` empty)."""
    return ["ip", "netns", "exec", ns, *argv] if ns else list(argv)


def unavailable() -> str | None:
    """Why this machine cannot run the lab (None: it can): root, ``ip``, ``nft``, and a
    namespace with an nftables ingress chain, tried for real."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install -y iproute2 nftables)"
    ns = f"{PREFIX}{os.getpid()}z-probe"
    try:
        run("ip", "netns", "add", ns)
    except (LabError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        run(*in_ns(ns, "nft", "-f", "-"), stdin=_chain_script("lo"))
    except (LabError, OSError, subprocess.TimeoutExpired) as exc:
        return f"nftables ingress chains do not work in a namespace: {exc}"
    finally:
        with contextlib.suppress(LabError, OSError, subprocess.TimeoutExpired):
            run("ip", "netns", "del", ns)
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_leftovers() -> list[str]:
    """Delete the namespaces and root-namespace devices of this suite whose creating
    process is dead (a crashed run); returns their names. Processes still inside such a
    namespace are not touched (they got SIGKILL with their creator: ``spawn``)."""
    removed: list[str] = []
    for line in run("ip", "netns", "list").splitlines():
        name = line.split(" ", 1)[0]
        found = _NS_NAME.match(name)
        if found and not _pid_alive(int(found.group(1))):
            with contextlib.suppress(LabError):
                run("ip", "netns", "del", name)
                removed.append(name)
    for link in json.loads(run("ip", "-j", "link", "show") or "[]"):
        name = str(link.get("ifname", ""))
        found = _DEV_NAME.match(name)
        if found and not _pid_alive(int(found.group(1))):
            with contextlib.suppress(LabError):
                run("ip", "link", "del", name)
                removed.append(name)
    return removed


def _chain_script(device: str) -> str:
    """An empty ingress chain on ``device`` (created with its table if need be)."""
    return (f"add table netdev {TABLE}\n"
            f"add chain netdev {TABLE} {_chain(device)} "
            f"{{ type filter hook ingress device \"{device}\" priority 0 ; policy accept ; }}\n")


def _chain(device: str) -> str:
    return f"in_{device}"


def _taken_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 route of the root namespace (all tables): a lab's /24 avoids them."""
    routes = json.loads(run("ip", "-j", "-4", "route", "show", "table", "all") or "[]")
    taken = []
    for route in routes:
        dst = str(route.get("dst", ""))
        if dst in ("default", ""):
            continue
        with contextlib.suppress(ValueError):
            taken.append(ipaddress.ip_network(dst, strict=False))
    return [net for net in taken if isinstance(net, ipaddress.IPv4Network)]


def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A /24 of SUPERNET that overlaps no root route (another lab's control link
    included), starting from a place picked by ``seed``."""
    subnets: list[ipaddress.IPv4Network] = list(SUPERNET.subnets(new_prefix=24))
    taken = _taken_networks()
    for step in range(len(subnets)):
        candidate = subnets[(seed + step) % len(subnets)]
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise LabError("no free /24 left in 10.64.0.0/10")


# -- faults ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A veth pair from ``srv`` to a peer namespace (root: ``ns`` empty)."""

    role: str
    ns: str
    peer_dev: str
    srv_dev: str
    peer_addr: str
    srv_addr: str

    @property
    def redis_url(self) -> str:
        """The lab's Redis as seen from this link's peer."""
        return f"redis://{self.srv_addr}:{REDIS_PORT}/0"


@dataclass(frozen=True)
class Counts:
    """Packets that reached one end's ingress while a fault was set, and those dropped."""

    seen: int
    dropped: int


DropRule = Callable[[], str]


def drop_all() -> str:
    return "counter drop"


def drop_to(addresses: Sequence[str]) -> DropRule:
    """Drop what is addressed to ``addresses`` (a cut between groups of peers: ``cut``)."""
    def rule() -> str:
        return f"ip daddr {{ {', '.join(addresses)} }} counter drop"
    return rule


def drop_percent(percent: int) -> DropRule:
    def rule() -> str:
        return f"numgen random mod 100 < {percent} counter drop"
    return rule


# -- processes ------------------------------------------------------------------------


def _child_setup(memory_bytes: int | None) -> Callable[[], None]:
    def setup() -> None:
        # Dies with the test process: a crashed run leaves nothing running.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return setup


def popen(ns: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
          cwd: Path | None = None, stdin: int | None = None,
          stdout: IO[bytes] | int | None = subprocess.DEVNULL,
          memory_bytes: int | None = None) -> subprocess.Popen[bytes]:
    """``argv`` started inside namespace ``ns``. ``ip netns exec`` execs the command, so
    the pid is the command's own: stop it by that pid. SIGKILLed if the test process
    dies; ``memory_bytes``: its address-space limit."""
    return subprocess.Popen(in_ns(ns, *argv), env=env, cwd=cwd, stdin=stdin, stdout=stdout,
                            stderr=subprocess.STDOUT, preexec_fn=_child_setup(memory_bytes))


def stop(process: subprocess.Popen[Any]) -> None:
    """SIGKILL (if still running) and reap, by pid; close its pipes."""
    if process.poll() is None:
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STOP_TIMEOUT)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


# -- the lab --------------------------------------------------------------------------


@dataclass
class Lab:
    """Namespaces ``srv`` and one per peer role, their links, the redis-server in
    ``srv``; ``destroy()`` (idempotent) kills what it started and deletes them all."""

    peers: Sequence[str]
    tag: str = ""
    srv: str = ""
    control: Link | None = None
    links: dict[str, Link] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cogworker-netns-")))
    subnet: ipaddress.IPv4Network | None = None

    def create(self) -> Lab:
        index = next(_labs)
        self.tag = f"{PREFIX}{os.getpid()}{chr(ord('a') + index % 26)}"
        if len(self.peers) + 1 > MAX_LINKS:
            raise LabError(f"at most {MAX_LINKS - 1} peers")
        self.subnet = _free_subnet(os.getpid() * 31 + index)
        try:
            self.srv = self._namespace("srv")
            self.control = self._link(0, "control", "")
            for number, role in enumerate(self.peers, start=1):
                self.links[role] = self._link(number, role, self._namespace(role))
        except BaseException:
            self.destroy()
            raise
        return self

    def _namespace(self, role: str) -> str:
        name = f"{self.tag}-{role}"
        run("ip", "netns", "add", name)
        self.namespaces.append(name)
        run("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def _link(self, number: int, role: str, ns: str) -> Link:
        assert self.subnet is not None
        base = self.subnet.network_address + 4 * number
        srv_addr, peer_addr = str(base + 1), str(base + 2)
        srv_dev, peer_dev = f"{self.tag}s{number}", f"{self.tag}p{number}"
        peer_where = ["netns", ns] if ns else []
        run("ip", "link", "add", peer_dev, *peer_where, "type", "veth",
            "peer", "name", srv_dev, "netns", self.srv)
        try:
            for where, dev, addr in ((ns, peer_dev, peer_addr), (self.srv, srv_dev, srv_addr)):
                scope = ["-n", where] if where else []
                run("ip", *scope, "addr", "add", f"{addr}/30", "dev", dev)
                run("ip", *scope, "link", "set", dev, "up")
        except LabError:
            if not ns:  # a root device outlives the lab's namespaces: deleted here
                run("ip", "link", "del", peer_dev)
            raise
        link = Link(role, ns, peer_dev, srv_dev, peer_addr, srv_addr)
        if ns:  # the control link (root) never gets a chain: it is never faulted
            run(*in_ns(ns, "nft", "-f", "-"), stdin=_chain_script(peer_dev))
            run(*in_ns(self.srv, "nft", "-f", "-"), stdin=_chain_script(srv_dev))
        return link

    def link(self, role: str) -> Link:
        return self.links[role]

    @property
    def control_url(self) -> str:
        assert self.control is not None
        return self.control.redis_url

    # -- processes --

    def spawn(self, ns: str, argv: Sequence[str], **options: Any) -> subprocess.Popen[bytes]:
        """A process in ``ns`` (see ``popen``), killed by ``destroy()``."""
        process = popen(ns, argv, **options)
        self.processes.append(process)
        return process

    def start_redis(self) -> subprocess.Popen[bytes]:
        """redis-server in ``srv``, bound to its end of every link and to its loopback
        (a latency proxy in ``srv`` reaches it there); returns once it answers over the
        control link."""
        binds = [link.srv_addr for link in self._all_links()] + ["127.0.0.1"]
        log = self.dir / "redis.log"
        process = self.spawn(self.srv, [
            server_binary(), "--port", str(REDIS_PORT), "--bind", *binds,
            "--dir", str(self.dir), "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--logfile", str(log),
            # Its namespace is reachable through the lab's own links only.
            "--protected-mode", "no"])
        client = redis.Redis.from_url(self.control_url, socket_connect_timeout=0.5,
                                      socket_timeout=1.0)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise LabError(f"redis-server exited: see {log}")
                with contextlib.suppress(redis.exceptions.RedisError):
                    if client.ping():
                        return process
                time.sleep(0.02)
        finally:
            client.close()
        raise LabError("redis-server in the lab did not answer in time")

    def _all_links(self) -> list[Link]:
        assert self.control is not None
        return [self.control, *self.links.values()]

    # -- faults --

    def fault(self, link: Link, *, to_peer: DropRule | None = None,
              to_srv: DropRule | None = None) -> None:
        """Replace ``link``'s rules: ``to_peer`` drops on the peer's ingress (what
        ``srv`` sends it), ``to_srv`` on ``srv``'s (what the peer sends); None: nothing
        dropped that way. Every packet reaching a faulted end is counted first."""
        assert link.ns, "the control link is never faulted"
        for ns, dev, rule in ((link.ns, link.peer_dev, to_peer),
                              (self.srv, link.srv_dev, to_srv)):
            script = f"flush chain netdev {TABLE} {_chain(dev)}\n"
            if rule is not None:
                script += f"add rule netdev {TABLE} {_chain(dev)} counter\n"
                script += f"add rule netdev {TABLE} {_chain(dev)} {rule()}\n"
            run(*in_ns(ns, "nft", "-f", "-"), stdin=script)

    def route(self) -> None:
        """Make ``srv`` a router: every peer reaches every other peer through it (each
        peer's default route), and the test process reaches every peer over the control
        link (a route to the lab's /24, gone with the control device). For topologies
        whose servers live in the peers' namespaces (Sentinel, replicas): ``cut``."""
        assert self.control is not None
        assert self.subnet is not None
        run(*in_ns(self.srv, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))
        for link in self.links.values():
            run("ip", "-n", link.ns, "route", "add", "default", "via", link.srv_addr)
        run("ip", "route", "add", str(self.subnet), "via", self.control.srv_addr,
            "dev", self.control.peer_dev)

    def cut(self, *sides: Sequence[Link]) -> None:
        """A partition between groups of peers of a ``route``d lab: what a peer sends to
        a peer of another side is lost where it enters ``srv``; peers of one side still
        reach each other, and the control link reaches everyone. ``heal`` each link."""
        for side in sides:
            others = [link.peer_addr for other in sides if other is not side
                      for link in other]
            for link in side:
                self.fault(link, to_srv=drop_to(others))

    def partition(self, link: Link) -> None:
        """Nothing crosses ``link`` either way."""
        self.fault(link, to_peer=drop_all, to_srv=drop_all)

    def lose(self, link: Link, percent: int) -> None:
        """Each packet crossing ``link`` (either way) is lost with ``percent`` % chance."""
        self.fault(link, to_peer=drop_percent(percent), to_srv=drop_percent(percent))

    def heal(self, link: Link) -> None:
        self.fault(link)

    def counts(self, link: Link) -> dict[str, Counts]:
        """``to_peer`` and ``to_srv``: packets seen and dropped since the fault was set."""
        found = {}
        for direction, ns, dev in (("to_peer", link.ns, link.peer_dev),
                                   ("to_srv", self.srv, link.srv_dev)):
            listing = json.loads(run(*in_ns(ns, "nft", "-j", "list", "chain", "netdev",
                                            TABLE, _chain(dev))))
            packets = [_rule_counter(item["rule"]) for item in listing["nftables"]
                       if "rule" in item]
            found[direction] = Counts(seen=packets[0] if packets else 0,
                                      dropped=packets[1] if len(packets) > 1 else 0)
        return found

    # -- teardown --

    def destroy(self) -> None:
        for process in self.processes:
            stop(process)
        self.processes.clear()
        if self.control is not None:  # at once (a namespace's devices go a moment later)
            with contextlib.suppress(LabError):
                run("ip", "link", "del", self.control.peer_dev)
            self.control = None
        for name in reversed(self.namespaces):  # their devices (and peers) go with them
            with contextlib.suppress(LabError):
                run("ip", "netns", "del", name)
        self.namespaces.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _rule_counter(rule: dict[str, Any]) -> int:
    for expr in rule.get("expr", []):
        if "counter" in expr:
            return int(expr["counter"]["packets"])
    return 0


def lab_names(tag: str) -> tuple[list[str], list[str]]:
    """The namespaces and root devices whose names start with ``tag`` (what a lab left)."""
    namespaces = [line.split(" ", 1)[0] for line in run("ip", "netns", "list").splitlines()
                  if line.startswith(tag)]
    devices = [str(link.get("ifname", ""))
               for link in json.loads(run("ip", "-j", "link", "show") or "[]")
               if str(link.get("ifname", "")).startswith(tag)]
    return namespaces, devices


class Lines:
    """The lines a process writes to its stdout pipe, each awaited with a bound."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        self.buffer = b""

    def next(self, timeout: float) -> str | None:
        """The next line, or None if none came within ``timeout`` s (or the pipe ended)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    return None
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def tell(process: subprocess.Popen[bytes], line: str) -> None:
    """Write one line to a process's stdin pipe."""
    assert process.stdin is not None
    process.stdin.write(line.encode() + b"\n")
    process.stdin.flush()
