#!/usr/bin/env python3
"""Side-by-side benchmark of cogworker-async and its peers on one private Redis.

    python benchmarks/run.py [--quick] [--systems a,b] [--scenarios x,y] [--runs N]
                             [--profile] [--no-write]

(``make bench`` runs it with the project's venv.) Each peer is installed from PyPI in its
own venv under ``benchmarks/.venvs/`` on first use; cogworker-async runs from the
project's ``.venv`` (uvloop is added to it if missing). A private ``redis-server`` is
started on a free loopback port and stopped by pid at the end.

For every scenario and system, the peer's script (``benchmarks/peers/<system>_peer.py``)
runs as a subprocess with that system's interpreter, through the system's own API and
its real worker class. The ``noop`` and ``processes`` scenarios run each system's worker
as its users start it, through its own CLI (``benchmarks/cli_workers.py``; ``--embedded``:
``noop`` with the worker embedded in the peer script instead, as before); ``noop_rtt``
runs the same through ``benchmarks/rtt_proxy.py`` (2 ms added each way), and after each
``noop`` run ``redis-benchmark`` calls a trivial script on the same server (its Redis CPU
per call, beside the Redis CPU per job). Results
(medians of ``--runs``) go to stdout as tables with the ratio of ours to each peer, to
``benchmarks/RESULTS.md`` and, raw, to ``benchmarks/results/<stamp>.json``. Only the
standard library is used here.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import functools
import json
import os
import platform
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import cli_workers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS = HERE / "peers"
VENVS = HERE / ".venvs"
RESULTS_DIR = HERE / "results"
OUR_PYTHON = ROOT / ".venv" / "bin" / "python"
OURS = "cogworker"


# -- systems ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class System:
    name: str
    label: str
    venv: str | None  # None: the project's venv
    script: str
    mode: str = "default"
    max_concurrency: int = 10_000
    note: str = ""


VENV_REQUIREMENTS: dict[str, list[str]] = {
    # saq 0.26.4 imports typing_extensions without declaring it.
    "arq": ["arq==0.28.*", "hiredis", "uvloop"],
    "saq": ["saq[hiredis]==0.26.*", "typing_extensions", "uvloop"],
    "taskiq": ["taskiq-redis==1.2.*", "taskiq", "hiredis", "uvloop"],
    "streaq": ["streaq==7.2.*", "uvloop"],
    "rq": ["rq==2.*", "hiredis"],
    "tools": ["py-spy"],
    # Ours as a user installs it (its base dependencies and uvloop; no development tools,
    # no opentelemetry: a worker with opentelemetry-api installed traces, and pays its
    # import), editable so that it runs the checkout's code.
    "cogworker": ["-e", f"{ROOT}[speed]"],
}

PACKAGES: dict[str, list[str]] = {  # versions reported per venv
    "arq": ["arq", "redis", "hiredis", "uvloop"],
    "saq": ["saq", "redis", "hiredis", "uvloop"],
    "taskiq": ["taskiq", "taskiq-redis", "redis", "hiredis", "uvloop"],
    "streaq": ["streaq", "coredis", "anyio", "uvloop"],
    "rq": ["rq", "redis", "hiredis"],
    "ours": ["cogworker-async", "redis", "hiredis", "anyio", "uvloop"],
}

SYSTEMS: dict[str, System] = {s.name: s for s in [
    System(OURS, "cogworker-async (reliable fetch)", None, "cogworker_peer.py"),
    System("arq", "arq (poll 0.5 s, default)", "arq", "arq_peer.py"),
    System("arq-10ms", "arq (poll 10 ms)", "arq", "arq_peer.py", mode="poll10ms"),
    System("saq", "SAQ", "saq", "saq_peer.py"),
    System("taskiq-list", "taskiq-redis list", "taskiq", "taskiq_peer.py", mode="list"),
    System("taskiq-stream", "taskiq-redis stream", "taskiq", "taskiq_peer.py", mode="stream"),
    System("streaq", "streaq", "streaq", "streaq_peer.py"),
    System("rq", "RQ (SimpleWorker)", "rq", "rq_peer.py", max_concurrency=1,
           note="sync, one job at a time: no-op processing at concurrency 1"),
]}
DEFAULT_SYSTEMS = list(SYSTEMS)

SCENARIOS = ["enqueue", "bulk", "noop", "processes", "noop_rtt", "latency", "sleep", "memory",
             "cluster", "durability", "metrics", "flow", "handoff", "ordering", "outbox"]
CLUSTER_SCRIPT = HERE / "cluster.py"
"""The ``cluster`` scenario (ours only, on its own servers): benchmarks/cluster.py."""
DURABILITY_SCRIPT = HERE / "durability.py"
"""The ``durability`` scenario (ours only, on its own servers): benchmarks/durability.py."""
METRICS_SCRIPT = HERE / "metrics_cost.py"
"""The ``metrics`` scenario (ours only, on its own server): benchmarks/metrics_cost.py."""
FLOW_SCRIPT = HERE / "flow_cost.py"
"""The ``flow`` scenario (ours only, on its own server): benchmarks/flow_cost.py."""
HANDOFF_SCRIPT = HERE / "handoff.py"
"""The ``handoff`` scenario (ours only, on its own server): benchmarks/handoff.py."""
ORDERING_SCRIPT = HERE / "ordering_cost.py"
"""The ``ordering`` scenario (ours only, on its own server): benchmarks/ordering_cost.py."""
OUTBOX_SCRIPT = HERE / "outbox_lag.py"
"""The ``outbox`` scenario (ours only, on its own server): benchmarks/outbox_lag.py."""
OWN_SERVERS = ("cluster", "durability", "metrics", "flow", "handoff", "ordering", "outbox")
"""Scenarios run by a script of their own, on their own servers (after the others)."""
FLEET = 2
"""Worker processes in the ``processes`` scenario (this machine has 2 cores)."""
RTT_PROXY = HERE / "rtt_proxy.py"
"""The ``noop_rtt`` scenario's loopback proxy (standard library, run with this driver's
interpreter): every chunk delayed by ``RTT_DELAY_MS`` each way."""
RTT_DELAY_MS = 2.0
"""Added by the proxy in each direction (a round trip: twice that, plus loopback)."""
TRIVIAL_SCRIPT = "return 1"
"""The trivial script whose Redis CPU per ``EVALSHA`` the no-op Redis CPU is set beside."""
TRIVIAL_CLIENTS = 10
"""``redis-benchmark -c``: connections calling the trivial script (the issue's -c 10)."""
CEILING_CLIENTS, CEILING_PIPELINE = 50, 16
"""The proxy's own ceiling: ``redis-benchmark -c 50 -P 16 PING`` through it."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    runs: int
    noop_n: int
    noop_cap: float
    proc_n: int
    """Jobs for ``processes``: a fleet's processes start some hundred ms apart, and all
    must have started a job before the queue is empty (2,000 no-ops last 0.1 s there)."""
    enqueue_n: int
    enqueue_cap: float
    bulk_n: int
    bulk_cap: float
    bulk_chunk: int
    probes: int
    probe_interval: float
    warmup: float
    idle_window: float
    sleep_n: int
    sleep_concurrency: int
    sleep_ms: float
    mem_ours: int
    mem_peers: int
    mem_processed: int
    profile_n: int
    evalsha_n: int
    """Calls of the trivial script after each no-op run (its Redis CPU per call)."""
    rtt_n: int
    """Jobs for ``noop_rtt``: through 2 ms each way a peer runs a few hundred a second."""
    rtt_cap: float
    ceiling_n: int
    """PINGs for the proxy's ceiling (``redis-benchmark -c 50 -P 16`` through it)."""


FULL = Sizes(runs=3, noop_n=20_000, noop_cap=30, proc_n=40_000, enqueue_n=10_000, enqueue_cap=20,
             bulk_n=50_000, bulk_cap=30, bulk_chunk=1000, probes=300, probe_interval=0.02,
             warmup=2, idle_window=10, sleep_n=2000, sleep_concurrency=100, sleep_ms=50,
             mem_ours=1_000_000, mem_peers=100_000, mem_processed=10_000, profile_n=30_000,
             evalsha_n=100_000, rtt_n=3000, rtt_cap=30, ceiling_n=400_000)
QUICK = Sizes(runs=1, noop_n=2000, noop_cap=10, proc_n=6000, enqueue_n=1000, enqueue_cap=10,
              bulk_n=10_000, bulk_cap=20, bulk_chunk=1000, probes=40, probe_interval=0.02,
              warmup=1, idle_window=3, sleep_n=2000, sleep_concurrency=100, sleep_ms=50,
              mem_ours=20_000, mem_peers=20_000, mem_processed=2000, profile_n=10_000,
              evalsha_n=20_000, rtt_n=1000, rtt_cap=15, ceiling_n=100_000)


# -- venvs -----------------------------------------------------------------------------

def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def base_python() -> str:
    return shutil.which("python3") or sys.executable


def ensure_venv(name: str) -> Path:
    """``benchmarks/.venvs/<name>``, created and installed from PyPI on first use (again
    if its requirements changed). Returns its interpreter."""
    directory = VENVS / name
    python = directory / "bin" / "python"
    stamp = directory / ".bench-requirements"
    wanted = "\n".join(VENV_REQUIREMENTS[name])
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    log(f"setting up {directory} ({', '.join(VENV_REQUIREMENTS[name])}) ...")
    VENVS.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        subprocess.run([base_python(), "-m", "venv", str(directory)], check=True)
    with open(VENVS / f"{name}.pip.log", "w") as out:
        subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                        "-q", *VENV_REQUIREMENTS[name]], check=True, stdout=out,
                       stderr=subprocess.STDOUT, timeout=900)
    stamp.write_text(wanted)
    return python


def ensure_our_python() -> Path:
    python = OUR_PYTHON
    if not python.exists():
        raise SystemExit(f"{python} is missing: run `make install` first")
    probe = subprocess.run([str(python), "-c", "import uvloop, cogworker_async"],
                           capture_output=True)
    if probe.returncode != 0:
        log("installing uvloop into the project's .venv (for the benchmark) ...")
        subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                        "-q", "uvloop"], check=True, timeout=600)
    return python


def interpreter(system: System) -> Path:
    return our_worker_python() if system.venv is None else ensure_venv(system.venv)


@functools.cache
def our_worker_python() -> Path:
    """Ours in ``benchmarks/.venvs/cogworker``, with the package's bytecode compiled as a
    wheel's install does (and as a user's first start leaves it): an editable install
    would otherwise compile it at every start where PYTHONDONTWRITEBYTECODE is set."""
    python = ensure_venv(OURS)
    found = subprocess.run([str(python), "-c", "import cogworker_async, os; "
                            "print(os.path.dirname(cogworker_async.__file__))"],
                           capture_output=True, text=True, check=True)
    subprocess.run([str(python), "-m", "compileall", "-q", found.stdout.strip()],
                   check=True, stdout=subprocess.DEVNULL)
    return python



def versions(python: Path, packages: list[str]) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for p in sys.argv[1:]:\n"
            "    try: out[p] = m.version(p)\n"
            "    except Exception: pass\n"
            "print(json.dumps(out))")
    done = subprocess.run([str(python), "-c", code, *packages], capture_output=True,
                          text=True, timeout=60)
    try:
        return dict(json.loads(done.stdout))
    except ValueError:
        return {}


# -- the private Redis -----------------------------------------------------------------

class Resp:
    """A minimal RESP2 client for the driver's own commands (INFO, FLUSHALL, PING)."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def call(self, *args: str | int) -> Any:
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))
        return self._read()

    def _read(self) -> Any:
        line = self.file.readline()
        if not line:
            raise ConnectionError("redis closed the connection")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            raise RuntimeError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            size = int(body)
            return None if size < 0 else self.file.read(size + 2)[:-2]
        if kind == b"*":
            size = int(body)
            return None if size < 0 else [self._read() for _ in range(size)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def info(self, *sections: str) -> dict[str, str]:
        text = self.call("INFO", *sections).decode()
        out = {}
        for line in text.splitlines():
            if ":" in line and not line.startswith("#"):
                key, _, value = line.partition(":")
                out[key] = value
        return out


class Monitor:
    """Counts the commands Redis runs while it is open (MONITOR), by who sent them: a
    client (a round trip, or one command of a pipeline) or a Lua script (``[0 lua]``).
    The driver's own connections are left out."""

    def __init__(self, port: int, ignore_ports: set[int]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=0.2)
        self.ignore = {f"127.0.0.1:{p}" for p in ignore_ports}
        self.ignore.add(f"127.0.0.1:{self.sock.getsockname()[1]}")
        self.client: Counter[str] = Counter()
        self.lua: Counter[str] = Counter()
        self._stop = threading.Event()
        self.sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        self._buffer = b""
        if self._line(deadline=time.monotonic() + 5) != b"+OK":
            raise RuntimeError("MONITOR refused")
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _line(self, deadline: float = float("inf")) -> bytes | None:
        """The next line, or None once stopped (or closed, or past ``deadline``)."""
        while b"\r\n" not in self._buffer:
            if self._stop.is_set() or time.monotonic() > deadline:
                return None
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return None
            if not data:
                return None
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line

    def _read(self) -> None:
        while (line := self._line()) is not None:
            text = line.decode("utf-8", "replace")
            source = text[text.find("[") + 1:text.find("]")].split(" ", 1)[-1]
            if source in self.ignore:
                continue
            rest = text[text.find("]") + 1:].strip()
            command = rest.split(" ", 1)[0].strip('"').lower()
            (self.lua if source == "lua" else self.client)[command] += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        with contextlib.suppress(OSError):
            self.sock.close()


def command_calls(info: dict[str, str]) -> dict[str, int]:
    calls = {}
    for key, value in info.items():
        if key.startswith("cmdstat_"):
            fields = dict(part.split("=", 1) for part in value.split(","))
            calls[key[len("cmdstat_"):]] = int(fields["calls"])
    return calls


def server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    done = subprocess.run([str(OUR_PYTHON), "-c", "from cogworker_async.redis.embedded "
                           "import find_binary; print(find_binary())"],
                          capture_output=True, text=True)
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip()
    raise SystemExit("no redis-server on PATH (apt-get install redis-server)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A private server on 127.0.0.1:<free port>, no persistence, stopped by pid."""

    def __init__(self) -> None:
        self.binary = server_binary()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cogworker-bench-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.conn: Resp | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def local_port(self) -> int:
        """The port of the driver's own connection (to leave it out of counts)."""
        assert self.conn is not None
        return int(self.conn.sock.getsockname()[1])

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--logfile", str(self.dir / "server.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"redis-server exited: see {self.dir / 'server.log'}")
            try:
                self.conn = Resp(self.port)
                if self.conn.call("PING") == "PONG":
                    return self
            except OSError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start in time")

    def version(self) -> str:
        info = self.info("server")
        return info.get("valkey_version") or info.get("redis_version", "?")

    def info(self, *sections: str) -> dict[str, str]:
        assert self.conn is not None
        return self.conn.info(*sections)

    def flush(self) -> None:
        assert self.conn is not None
        self.conn.call("FLUSHALL")
        self.conn.call("CONFIG", "RESETSTAT")

    def cpu(self) -> float:
        info = self.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def used_memory(self) -> int:
        return int(self.info("memory")["used_memory"])

    def stop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
            self.conn = None
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_benchmark(port: int, clients: int, n: int, *command: str,
                    pipeline: int = 1) -> float | None:
    """``redis-benchmark`` against 127.0.0.1:``port``: requests per second (None when
    it is not installed)."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    done = subprocess.run([binary, "-p", str(port), "-c", str(clients), "-n", str(n),
                           "-P", str(pipeline), "--csv", *command],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise ScenarioError(f"redis-benchmark exited with {done.returncode}: "
                            f"{done.stderr.strip()[-300:]}")
    rows = [line.split('","') for line in done.stdout.splitlines()
            if line.startswith('"') and not line.startswith('"test"')]
    if not rows:
        raise ScenarioError(f"redis-benchmark said nothing: {done.stdout[-300:]!r}")
    return float(rows[-1][1])


def python_calls(port: int, clients: int, n: int, *command: str) -> float:
    """The fallback of ``redis-benchmark``: ``clients`` connections (a thread each),
    each sending its share of ``n`` calls one at a time; calls per second."""
    share = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    conns = [Resp(port) for _ in range(clients)]

    def calls(conn: Resp, count: int) -> None:
        for _ in range(count):
            conn.call(*command)

    began = time.monotonic()
    threads = [threading.Thread(target=calls, args=pair) for pair in zip(conns, share,
                                                                        strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - began
    for conn in conns:
        conn.close()
    return n / seconds


class RttProxy:
    """``benchmarks/rtt_proxy.py`` in front of the private Redis, stopped by pid."""

    def __init__(self, target_port: int, delay_ms: float, log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "w")
        self.delay_ms = delay_ms
        self.process = subprocess.Popen(
            [sys.executable, str(RTT_PROXY), "--target-port", str(target_port),
             "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE, stderr=self.log,
            text=True)
        found: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: found.put(self.process.stdout.readline()
                                                  if self.process.stdout else ""),
                         daemon=True).start()
        try:
            line = found.get(timeout=15)
            self.port = int(json.loads(line)["port"])
        except (queue.Empty, ValueError, KeyError) as exc:
            self.stop()
            raise SystemExit(f"rtt_proxy.py did not start (see {log_path})") from exc

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def round_trip_ms(self, pings: int = 200) -> float:
        """The mean time of a PING through the proxy, one at a time."""
        conn = Resp(self.port)
        try:
            conn.call("PING")
            began = time.monotonic()
            for _ in range(pings):
                conn.call("PING")
            return 1000 * (time.monotonic() - began) / pings
        finally:
            conn.close()

    def stop(self) -> None:
        process = self.process
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()
        self.log.close()


# -- peer processes ----------------------------------------------------------------------

class ScenarioError(Exception):
    pass


class Child:
    """One peer-script process; its stdout is read as JSON lines on a thread."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.stderr = open(log_path, "w")
        self.stderr.write("$ " + " ".join(argv) + "\n")
        self.stderr.flush()
        self.process = subprocess.Popen(argv, cwd=PEERS, stdout=subprocess.PIPE,
                                        stderr=self.stderr, text=True, bufsize=1)
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.stderr.write("stdout: " + line)
        self.lines.put(None)

    def wait_event(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ScenarioError(f"no {event!r} within {timeout:.0f}s (see {self.log_path})")
            try:
                message = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if message is None:
                self.process.wait()
                raise ScenarioError(f"exited with {self.process.returncode} before "
                                    f"{event!r} (see {self.log_path})")
            if message.get("event") == event:
                return message

    def finish(self, timeout: float = 20.0) -> None:
        """Wait for the process to exit; kill it (by its pid) if it does not."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()


proc_cpu = cli_workers.proc_cpu


# -- scenarios -------------------------------------------------------------------------

class Bench:
    def __init__(self, args: argparse.Namespace, sizes: Sizes, redis: RedisServer) -> None:
        self.args = args
        self.sizes = sizes
        self.redis = redis
        self.stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.logs = RESULTS_DIR / "logs" / self.stamp
        self.pythons: dict[str, Path] = {}
        self.proxy: RttProxy | None = None
        """The ``noop_rtt`` scenario's proxy in front of ``redis`` (started by main)."""

    def argv(self, system: System, *command: str | int | float,
             url: str | None = None) -> list[str]:
        python = self.pythons.get(system.name)
        if python is None:
            python = self.pythons[system.name] = interpreter(system)
        return [str(python), str(PEERS / system.script), "--redis-url",
                url or self.redis.url, "--mode", system.mode, *map(str, command)]

    def child(self, system: System, tag: str, *command: str | int | float,
              url: str | None = None) -> Child:
        return Child(self.argv(system, *command, url=url),
                     self.logs / f"{system.name}-{tag}.log")

    def oneshot(self, system: System, tag: str, timeout: float,
                *command: str | int | float, url: str | None = None) -> dict[str, Any]:
        child = self.child(system, tag, *command, url=url)
        try:
            return child.wait_event("result", timeout)
        finally:
            child.finish()

    def prefill(self, system: System, tag: str, n: int, job: str = "noop",
                url: str | None = None) -> None:
        result = self.oneshot(system, f"{tag}-prefill", 900, "enqueue-bulk", "--n", n,
                              "--job", job, "--chunk", self.sizes.bulk_chunk,
                              "--max-seconds", 600, url=url)
        if result["n"] < n:
            raise ScenarioError(f"prefill stopped at {result['n']} of {n} jobs")

    def concurrency(self, system: System, wanted: int) -> int:
        return min(wanted, system.max_concurrency)

    def work(self, system: System, tag: str, n: int, concurrency: int, cap: float,
             job: str = "noop", url: str | None = None) -> tuple[dict[str, Any], float]:
        """Run a worker over ``n`` prefilled jobs; its result and the Redis CPU used."""
        redis_cpu = self.redis.cpu()
        extra = ["--cprofile", str(self.logs / "profile-worker.cprofile")] \
            if tag == "cprofile" else []
        child = self.child(system, tag, "work", "--n", n, "--concurrency", concurrency,
                           "--job", job, "--sleep-ms", self.sizes.sleep_ms,
                           "--max-seconds", cap, *extra, url=url)
        try:
            result = child.wait_event("result", cap + 60)
            return result, self.redis.cpu() - redis_cpu
        finally:
            child.finish()

    # each returns a dict of metrics for one run

    def enqueue(self, system: System, run: int) -> dict[str, Any]:
        s = self.sizes
        result = self.oneshot(system, f"enqueue-{run}", s.enqueue_cap + 60, "enqueue",
                              "--n", s.enqueue_n, "--max-seconds", s.enqueue_cap)
        return {"enqueue_rate": result["n"] / result["seconds"],
                "enqueue_cpu_us": 1e6 * result["cpu"] / result["n"],
                "enqueue_capped": result["capped"]}

    def bulk(self, system: System, run: int) -> dict[str, Any]:
        s = self.sizes
        result = self.oneshot(system, f"bulk-{run}", s.bulk_cap + 60, "enqueue-bulk",
                              "--n", s.bulk_n, "--chunk", s.bulk_chunk,
                              "--max-seconds", s.bulk_cap)
        return {"bulk_rate": result["n"] / result["seconds"], "bulk_method": result["method"],
                "bulk_capped": result["capped"]}

    def noop(self, system: System, run: int) -> dict[str, Any]:
        """One worker process over ``noop_n`` queued no-op jobs: the system's own CLI
        worker (``--embedded``: the worker embedded in the peer script)."""
        s = self.sizes
        self.prefill(system, f"noop-{run}", s.noop_n)
        concurrency = self.concurrency(system, self.args.concurrency)
        if not self.args.embedded:
            out = self.fleet(system, f"noop-{run}", "noop", 1, concurrency)
        else:
            result, redis_cpu = self.work(system, f"noop-{run}", s.noop_n, concurrency,
                                          s.noop_cap)
            n = max(1, result["n"])
            out = {"noop_rate": rate(n, result.get("span")),
                   "noop_rate_from_start": n / result["seconds"],
                   "noop_cpu_us": 1e6 * result["cpu"] / n,
                   "noop_redis_cpu_us": 1e6 * redis_cpu / n, "noop_capped": result["capped"],
                   "noop_concurrency": concurrency, "noop_first_job_ms":
                   None if result["first_job"] is None else 1000 * result["first_job"]}
        out.update(self.trivial_script())
        if out.get("noop_redis_cpu_us") is not None and out["noop_evalsha_cpu_us"] > 0:
            out["noop_redis_per_evalsha"] = \
                out["noop_redis_cpu_us"] / out["noop_evalsha_cpu_us"]
        return out

    def trivial_script(self) -> dict[str, Any]:
        """Redis' CPU per call of a trivial script (``EVALSHA`` of ``return 1``), on the
        same server as the no-op run just before it: ``redis-benchmark -c 10`` (without
        it, 10 Python connections calling one at a time)."""
        assert self.redis.conn is not None
        sha = self.redis.conn.call("SCRIPT", "LOAD", TRIVIAL_SCRIPT).decode()
        n = self.sizes.evalsha_n
        before = self.redis.cpu()
        calls = redis_benchmark(self.redis.port, TRIVIAL_CLIENTS, n, "EVALSHA", sha, "0")
        tool = "redis-benchmark"
        if calls is None:
            calls = python_calls(self.redis.port, TRIVIAL_CLIENTS, n, "EVALSHA", sha, "0")
            tool = "python"
        used = self.redis.cpu() - before
        return {"noop_evalsha_cpu_us": 1e6 * used / n, "noop_evalsha_rate": calls,
                "noop_evalsha_tool": tool}

    def noop_rtt(self, system: System, run: int) -> dict[str, Any]:
        """``noop`` through the proxy (``RTT_DELAY_MS`` each way): the prefill and the
        worker both connect to it (``--embedded``: the embedded worker)."""
        if self.proxy is None:
            return {"noop_rtt_skipped": "no proxy"}
        s = self.sizes
        url = self.proxy.url
        self.prefill(system, f"noop-rtt-{run}", s.rtt_n, url=url)
        concurrency = self.concurrency(system, self.args.concurrency)
        if not self.args.embedded:
            return self.fleet(system, f"noop-rtt-{run}", "rtt", 1, concurrency, s.rtt_n,
                              cap=s.rtt_cap, url=url)
        result, redis_cpu = self.work(system, f"noop-rtt-{run}", s.rtt_n, concurrency,
                                      s.rtt_cap, url=url)
        n = max(1, result["n"])
        return {"rtt_rate": rate(n, result.get("span")), "rtt_cpu_us": 1e6 * result["cpu"] / n,
                "rtt_redis_cpu_us": 1e6 * redis_cpu / n, "rtt_capped": result["capped"],
                "rtt_concurrency": concurrency}

    def processes(self, system: System, run: int) -> dict[str, Any]:
        """``FLEET`` worker processes over ``noop_n`` queued no-op jobs, through the
        system's own multi-process mode (arq has none: ``FLEET`` arq commands)."""
        if self.args.embedded:
            return {"proc_skipped": "--embedded"}
        s = self.sizes
        self.prefill(system, f"processes-{run}", s.proc_n)
        concurrency = self.concurrency(system, self.args.concurrency)
        return self.fleet(system, f"processes-{run}", "proc", FLEET, concurrency, s.proc_n)

    def fleet(self, system: System, tag: str, prefix: str, processes: int,
              concurrency: int, n: int | None = None, cap: float | None = None,
              url: str | None = None) -> dict[str, Any]:
        """The system's CLI worker(s) over ``n`` (``noop_n``) queued jobs
        (``cli_workers.run``), connected to ``url`` (the private Redis); Redis' CPU is
        read from the server itself."""
        s = self.sizes
        try:
            result = cli_workers.run(system.venv, system.mode, processes, concurrency,
                                     url or self.redis.url, n or s.noop_n,
                                     cap or s.noop_cap, self.redis.cpu,
                                     self.logs / f"{system.name}-{tag}.log")
        except cli_workers.FleetError as exc:
            raise ScenarioError(str(exc)) from exc
        if not result["all_started"]:
            raise ScenarioError(f"{processes} processes asked, jobs ran in "
                                f"{len(result['per_process'])}: {result['per_process']}")
        jobs = max(1, result["window_jobs"])
        return {f"{prefix}_rate": jobs / result["window"] if result["window"] > 0 else None,
                f"{prefix}_cpu_us": 1e6 * result["worker_cpu"] / jobs,
                f"{prefix}_redis_cpu_us": 1e6 * result["redis_cpu"] / jobs,
                f"{prefix}_capped": result["capped"], f"{prefix}_concurrency": concurrency,
                f"{prefix}_first_job_ms": 1000 * result["first_job"],
                f"{prefix}_stagger_ms": 1000 * result["stagger"],
                f"{prefix}_per_process": result["per_process"]}

    def sleep(self, system: System, run: int) -> dict[str, Any]:
        s = self.sizes
        if system.max_concurrency < s.sleep_concurrency:
            return {"sleep_skipped": f"concurrency {system.max_concurrency}"}
        self.prefill(system, f"sleep-{run}", s.sleep_n, job="sleep")
        result, _ = self.work(system, f"sleep-{run}", s.sleep_n, s.sleep_concurrency,
                              60, job="sleep")
        return {"sleep_seconds": result["seconds"], "sleep_capped": result["capped"],
                "sleep_peak_running": result.get("peak_running"),
                "sleep_cpu_us": 1e6 * result["cpu"] / max(1, result["n"])}

    def latency(self, system: System, run: int) -> dict[str, Any]:
        """An idle worker: its Redis calls and CPU per second, then pick-up latency of
        jobs enqueued one by one at ``probe_interval``."""
        s = self.sizes
        concurrency = self.concurrency(system, self.args.concurrency)
        cap = s.warmup + s.idle_window + s.probes * (s.probe_interval + 0.05) + 60
        worker = self.child(system, f"latency-{run}-worker", "work", "--n", s.probes,
                            "--concurrency", concurrency, "--job", "probe",
                            "--max-seconds", cap)
        try:
            worker.wait_event("ready", 60)
            time.sleep(s.warmup)
            monitor = Monitor(self.redis.port, {self.redis.local_port})
            try:
                before = self.redis.info("stats", "commandstats")
                cpu_before, began = proc_cpu(worker.pid), time.monotonic()
                time.sleep(s.idle_window)
                after = self.redis.info("stats", "commandstats")
                cpu_after, window = proc_cpu(worker.pid), time.monotonic() - began
            finally:
                monitor.close()
            calls = Counter(command_calls(after))
            calls.subtract(command_calls(before))
            info_calls = calls.pop("info", 0)
            calls.pop("monitor", None)
            total = (int(after["total_commands_processed"])
                     - int(before["total_commands_processed"]) - info_calls)
            client = self.oneshot(system, f"latency-{run}-client", cap, "enqueue",
                                  "--n", s.probes, "--job", "probe",
                                  "--interval", s.probe_interval, "--max-seconds", cap)
            result = worker.wait_event("result", 30)
        finally:
            worker.finish()
        latencies = sorted(1000 * x for x in result["latencies"])
        if not latencies or client["n"] < s.probes:
            raise ScenarioError(f"{len(latencies)} probes came back of {client['n']} sent")
        return {
            "idle_calls_per_s": sum(monitor.client.values()) / window,
            "idle_all_commands_per_s": total / window,
            "idle_commands": {k: round(v / window, 2)
                              for k, v in monitor.client.most_common() if v},
            "idle_lua_commands": {k: round(v / window, 2)
                                  for k, v in monitor.lua.most_common() if v},
            "idle_cpu_ms_per_s": 1000 * (cpu_after - cpu_before) / window,
            "latency_p50_ms": percentile(latencies, 50),
            "latency_p99_ms": percentile(latencies, 99),
            "latency_max_ms": latencies[-1],
            "latency_probes": len(latencies),
        }

    def memory(self, system: System) -> dict[str, Any]:
        """Redis bytes per queued job; worker RSS with a long vs a short queue."""
        s = self.sizes
        big = s.mem_ours if system.name == OURS else s.mem_peers
        concurrency = self.concurrency(system, self.args.concurrency)
        self.redis.flush()
        used = self.redis.used_memory()
        filled = self.oneshot(system, "memory-fill", 1800, "enqueue-bulk", "--n", big,
                              "--chunk", s.bulk_chunk, "--max-seconds", 1200)
        per_job = (self.redis.used_memory() - used) / filled["n"]
        long_queue, _ = self.work(system, "memory-long", s.mem_processed, concurrency, 120)
        self.redis.flush()
        self.prefill(system, "memory-short", s.mem_processed)
        short_queue, _ = self.work(system, "memory-short", s.mem_processed, concurrency, 120)
        self.redis.flush()
        return {"mem_queued": filled["n"], "mem_bytes_per_job": per_job,
                "mem_rss_long_mb": long_queue["rss_kb"] / 1024,
                "mem_rss_short_mb": short_queue["rss_kb"] / 1024}


def rate(n: int, span: float | None) -> float | None:
    """Jobs per second from the first job's start to the last one's."""
    return None if not span or n < 2 else (n - 1) / span


def percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# -- reporting -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str
    higher_is_better: bool
    scenario: str
    digits: int = 0
    compare: bool = True


METRICS = [
    Metric("noop_rate", "no-op processing", "jobs/s", True, "noop"),
    Metric("noop_cpu_us", "worker CPU / job", "µs", False, "noop"),
    Metric("noop_redis_cpu_us", "Redis CPU / job", "µs", False, "noop"),
    Metric("noop_evalsha_cpu_us", "↳ Redis CPU / one trivial EVALSHA, same run", "µs", False,
           "noop", 1, compare=False),
    Metric("noop_redis_per_evalsha", "↳ Redis CPU / job ÷ one trivial EVALSHA", "×", False,
           "noop", 2, compare=False),
    Metric("noop_first_job_ms", "↳ start to first job", "ms", False, "noop", 1,
           compare=False),
    Metric("proc_rate", f"no-op processing, {FLEET} processes", "jobs/s", True, "processes"),
    Metric("proc_scaling", f"↳ {FLEET} processes ÷ 1", "×", True, "processes", 2,
           compare=False),
    Metric("proc_cpu_us", f"worker CPU / job, {FLEET} processes", "µs", False, "processes"),
    Metric("proc_redis_cpu_us", f"Redis CPU / job, {FLEET} processes", "µs", False,
           "processes"),
    Metric("rtt_rate", f"no-op processing, {RTT_DELAY_MS:g} ms each way (proxy)", "jobs/s",
           True, "noop_rtt"),
    Metric("rtt_vs_direct", "↳ through the proxy ÷ direct", "×", True, "noop_rtt", 2,
           compare=False),
    Metric("rtt_redis_cpu_us", "Redis CPU / job, through the proxy", "µs", False,
           "noop_rtt"),
    Metric("enqueue_rate", "enqueue, one at a time", "jobs/s", True, "enqueue"),
    Metric("bulk_rate", "bulk enqueue", "jobs/s", True, "bulk"),
    Metric("latency_p50_ms", "pick-up p50", "ms", False, "latency", 2),
    Metric("latency_p99_ms", "pick-up p99", "ms", False, "latency", 2),
    Metric("idle_calls_per_s", "idle: commands sent to Redis", "/s", False, "latency", 1),
    Metric("idle_all_commands_per_s", "idle: commands run, incl. in Lua", "/s", False,
           "latency", 1),
    Metric("idle_cpu_ms_per_s", "idle worker CPU", "ms/s", False, "latency", 1),
    Metric("sleep_seconds", "2,000 × sleep 50 ms @100", "s", False, "sleep", 2),
    Metric("sleep_peak_running", "↳ peak jobs running at once", "", True, "sleep",
           compare=False),
    Metric("mem_bytes_per_job", "Redis bytes / queued job", "B", False, "memory"),
    Metric("mem_rss_short_mb", "worker RSS, short queue", "MB", False, "memory", 1),
    Metric("mem_rss_long_mb", "worker RSS, long queue", "MB", False, "memory", 1),
]


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each numeric metric over the runs; a flag (capped) if any run set
    it; anything else (errors, methods) from the last run that has it."""
    merged: dict[str, Any] = {}
    for key in {k for run in runs for k in run}:
        values = [run[key] for run in runs if key in run]
        if all(is_number(v) for v in values):
            merged[key] = statistics.median(values)
        elif all(isinstance(v, bool) for v in values):
            merged[key] = any(values)
        else:
            merged[key] = values[-1]
    return merged


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def ratio(ours: float | None, peer: float | None, higher_is_better: bool) -> str:
    if ours is None or peer is None:
        return "–"
    if ours == peer:
        return "×1.00"
    better, worse = (ours, peer) if higher_is_better else (peer, ours)
    if worse == 0:
        return "∞"
    return f"×{better / worse:.2f}"


CAPPED = {"noop_rate": "noop_capped", "noop_cpu_us": "noop_capped",
          "proc_rate": "proc_capped", "proc_cpu_us": "proc_capped", "rtt_rate": "rtt_capped",
          "enqueue_rate": "enqueue_capped", "bulk_rate": "bulk_capped",
          "sleep_seconds": "sleep_capped"}


def cell(metrics: dict[str, Any], metric: Metric, concurrency: int) -> str:
    value = metrics.get(metric.key)
    if value is None:
        if metrics.get(f"{metric.scenario}_skipped") or \
                (metric.scenario == "processes" and metrics.get("proc_skipped")):
            return "n/a"
        return "error" if metrics.get(f"error_{metric.scenario}") else "–"
    text = fmt(value, metric.digits)
    if metrics.get(CAPPED.get(metric.key, ""), False):
        text += " †"
    if metric.key == "bulk_rate" and metrics.get("bulk_method") == "gather":
        text += " g"
    for key in ("noop", "proc", "rtt"):
        if metric.key == f"{key}_rate" and \
                metrics.get(f"{key}_concurrency", concurrency) != concurrency:
            text += f" (c={metrics[f'{key}_concurrency']})"
    return text


def tables(results: dict[str, dict[str, Any]], systems: list[System], concurrency: int) -> str:
    names = [s.name for s in systems]
    lines = ["| metric | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for metric in METRICS:
        if not any(results.get(n, {}).get(metric.key) is not None for n in names):
            continue
        row = [cell(results.get(n, {}), metric, concurrency) for n in names]
        unit = f" ({metric.unit})" if metric.unit else ""
        lines.append(f"| {metric.title}{unit} | " + " | ".join(row) + " |")
    peers = [n for n in names if n != OURS]
    ours = results.get(OURS, {})
    if ours and peers:
        lines += ["", "Ours vs each peer (×N > 1: ours is N times better: faster, or "
                  "less CPU/latency/calls/memory):", "",
                  "| metric | " + " | ".join(peers) + " |",
                  "|---|" + "---:|" * len(peers)]
        for metric in METRICS:
            if ours.get(metric.key) is None or not metric.compare:
                continue
            row = [ratio(ours.get(metric.key), results.get(n, {}).get(metric.key),
                         metric.higher_is_better) for n in peers]
            lines.append(f"| {metric.title} | " + " | ".join(row) + " |")
    return "\n".join(lines)


Row = tuple[str, str, bool | None]


def processing_targets(ours: dict[str, Any], peers: dict[str, dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    rate = ours.get("noop_rate")
    same = [(r["noop_rate"], n) for n, r in peers.items() if r.get("noop_rate")
            and r.get("noop_concurrency") == ours.get("noop_concurrency")]
    if rate and same:
        best, name = max(same)
        rows.append(("no-op processing ≥ 3× the best peer",
                     f"{fmt(rate)}/s = ×{rate / best:.2f} {name}", rate >= 3 * best))
    per = ours.get("noop_redis_per_evalsha")
    if per is not None:
        rows.append(("Redis CPU per no-op job ≤ 0.5× one trivial EVALSHA (same run)",
                     f"{ours['noop_redis_cpu_us']:.1f} ÷ {ours['noop_evalsha_cpu_us']:.1f} µs "
                     f"= ×{per:.2f}", per <= 0.5))
    rtt = ours.get("rtt_rate")
    same = [(r["rtt_rate"], n) for n, r in peers.items() if r.get("rtt_rate")
            and r.get("rtt_concurrency") == ours.get("rtt_concurrency")]
    if rtt and same:
        best, name = max(same)
        rows.append((f"no-op processing with {RTT_DELAY_MS:g} ms each way ≥ 5× the best peer",
                     f"{fmt(rtt)}/s = ×{rtt / best:.2f} {name}", rtt >= 5 * best))
    if ours.get("proc_scaling") is not None:
        rows.append((f"`--processes {FLEET}` ≥ 1.6× one process",
                     f"{fmt(ours['proc_rate'])}/s = ×{ours['proc_scaling']:.2f}",
                     ours["proc_scaling"] >= 1.6))
    if ours.get("noop_cpu_us") is not None:
        rows.append(("worker CPU ≤ 150 µs/job", f"{fmt(ours['noop_cpu_us'])} µs",
                     ours["noop_cpu_us"] <= 150))
    saq = peers.get("saq", {}).get("enqueue_rate")
    if ours.get("enqueue_rate") and saq:
        rows.append(("enqueue one at a time ≥ 1.5× SAQ",
                     f"{fmt(ours['enqueue_rate'])}/s = ×{ours['enqueue_rate'] / saq:.2f} SAQ",
                     ours["enqueue_rate"] >= 1.5 * saq))
    if ours.get("bulk_rate"):
        rows.append(("enqueue_many ≥ 50,000 jobs/s", f"{fmt(ours['bulk_rate'])}/s",
                     ours["bulk_rate"] >= 50_000))
    return rows


def other_targets(ours: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    if ours.get("latency_p50_ms") is not None:
        rows += [("pick-up p50 ≤ 1 ms", f"{ours['latency_p50_ms']:.2f} ms",
                  ours["latency_p50_ms"] <= 1),
                 ("pick-up p99 ≤ 3 ms", f"{ours['latency_p99_ms']:.2f} ms",
                  ours["latency_p99_ms"] <= 3),
                 ("idle process: a few Redis commands/s (read: ≤ 5/s sent)",
                  f"{ours['idle_calls_per_s']:.1f}/s", ours["idle_calls_per_s"] <= 5)]
    if ours.get("sleep_seconds") is not None:
        rows.append(("2,000 × 50 ms @100 ≤ 1.10 s (ideal 1.0)",
                     f"{ours['sleep_seconds']:.2f} s", ours["sleep_seconds"] <= 1.10))
    if ours.get("mem_rss_long_mb") is not None:
        short, long = ours["mem_rss_short_mb"], ours["mem_rss_long_mb"]
        rows += [(f"worker memory flat with {fmt(ours['mem_queued'])} queued "
                  "(long − short ≤ max(2 MB, 5 %))", f"{short:.1f} → {long:.1f} MB",
                  long - short <= max(2.0, 0.05 * short)),
                 ("Redis bytes per queued job (reported)",
                  f"{fmt(ours['mem_bytes_per_job'])} B", None)]
    return rows


def targets(results: dict[str, dict[str, Any]]) -> str:
    ours = results.get(OURS, {})
    if not ours:
        return ""
    peers = {n: r for n, r in results.items() if n != OURS}
    rows = processing_targets(ours, peers) + other_targets(ours)
    lines = ["| target | ours | met? |", "|---|---:|:---:|"]
    for label, shown, ok in rows:
        lines.append(f"| {label} | {shown} | {'–' if ok is None else ('yes' if ok else 'NO')} |")
    return "\n".join(lines)


def code_version() -> str:
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except OSError:
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "?"
    changed = [line for line in git("status", "--porcelain", "--", "cogworker_async")
               .splitlines() if line.strip()]
    return commit + (f" + {len(changed)} uncommitted file(s) in cogworker_async/"
                     if changed else "")


def machine() -> dict[str, str]:
    def out(*argv: str) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
        except OSError:
            return ""

    model = next((line.split(":", 1)[1].strip() for line in out("lscpu").splitlines()
                  if line.startswith("Model name")), platform.processor() or "?")
    memory = next((" ".join(line.split()[1:2]) for line in out("free", "-h").splitlines()
                   if line.startswith("Mem:")), "?")
    return {"nproc": out("nproc").strip(), "cpu": model, "memory": memory,
            "kernel": platform.release(), "python": platform.python_version()}


def idle_breakdown(results: dict[str, dict[str, Any]], systems: list[System]) -> str:
    lines = []
    for system in systems:
        metrics = results.get(system.name, {})
        if "idle_commands" not in metrics:
            continue
        sent = ", ".join(f"{k} {v:g}" for k, v in list(metrics["idle_commands"].items())[:8])
        lua = ", ".join(f"{k} {v:g}"
                        for k, v in list(metrics.get("idle_lua_commands", {}).items())[:8])
        lines.append(f"- {system.name}: {sent or 'none'}"
                     + (f" (inside Lua: {lua})" if lua else ""))
    return "\n".join(lines)


# -- profile ---------------------------------------------------------------------------

def profile(bench: Bench) -> str:
    """py-spy over our worker while it runs no-op jobs (attached once it is ready, so
    imports and start-up are left out), then over a client enqueueing one at a time."""
    ours = SYSTEMS[OURS]
    n = bench.sizes.profile_n
    spy = str(ensure_venv("tools").parent / "py-spy")
    sampling = ["--rate", "250", "--format", "raw", "--output"]
    bench.redis.flush()
    bench.prefill(ours, "profile", n)
    worker_raw = bench.logs / "profile-worker.txt"
    worker = bench.child(ours, "profile-worker", "work", "--n", n, "--concurrency",
                         bench.args.concurrency, "--max-seconds", 120)
    recorder = None
    try:
        worker.wait_event("ready", 60)
        recorder = Child([spy, "record", "--pid", str(worker.pid), *sampling,
                          str(worker_raw)], bench.logs / "profile-worker-py-spy.log")
        worked = worker.wait_event("result", 200)
    finally:
        worker.finish(60)
        if recorder is not None:
            recorder.finish(60)
    bench.redis.flush()
    calls = profile_calls(bench, n)
    client_raw = bench.logs / "profile-client.txt"
    enqueues = max(1000, n // 3)
    client = Child([spy, "record", *sampling, str(client_raw), "--",
                    *bench.argv(ours, "enqueue", "--n", enqueues, "--max-seconds", 120)],
                   bench.logs / "profile-client.log")
    try:
        enqueued = client.wait_event("result", 200)
    finally:
        client.finish(60)
    bench.redis.flush()
    parts = []
    if worker_raw.exists():
        parts += [f"Worker: {worked['n']:,} no-op jobs at concurrency "
                  f"{bench.args.concurrency}, {worked['n'] / worked['seconds']:,.0f} jobs/s "
                  f"under the profiler ({worker_raw.relative_to(ROOT)}).", "",
                  summarize_profile(worker_raw, "Runner.run (asyncio/runners.py"), ""]
    parts += [calls, ""]
    if client_raw.exists():
        parts += [f"Client: {enqueued['n']:,} enqueues one at a time, "
                  f"{enqueued['n'] / enqueued['seconds']:,.0f}/s under the profiler "
                  f"({client_raw.relative_to(ROOT)}).", "",
                  summarize_profile(client_raw, "enqueue (common.py")]
    if parts:
        parts += ["", PROFILE_NOTE]
    return "\n".join(parts) or "(py-spy wrote nothing: see the logs)"


PROFILE_NOTE = (
    "Reading it: py-spy (without --native) books time spent in C — uvloop, the C task\n"
    "step, socket writes — to a nearby Python frame: Runner.run, and in the worker mostly\n"
    "asyncio's current_task (called ~17×/job by anyio). cProfile's call counts are exact,\n"
    "its times inflated by its own overhead: compare them with each other.")


def profile_calls(bench: Bench, n: int, top: int = 15) -> str:
    """cProfile over the same run: exact calls per job (its times are inflated by its
    own overhead, about 2×: read them relative to each other)."""
    ours = SYSTEMS[OURS]
    bench.prefill(ours, "cprofile", n)
    dump = bench.logs / "profile-worker.cprofile"
    result, _ = bench.work(ours, "cprofile", n, bench.args.concurrency, 120)
    bench.redis.flush()
    if not dump.exists():
        return "(cProfile wrote nothing)"
    import pstats

    done = max(1, result["n"])
    rows = []
    for (path, line, name), (_, calls, own, _cumulative, _) in \
            pstats.Stats(str(dump)).stats.items():  # type: ignore[attr-defined]
        where = path.split("site-packages/")[-1].replace(str(ROOT) + "/", "")
        where = where.split("/lib/python3")[-1].lstrip(".0123456789/")
        rows.append((calls / done, 1e6 * own / done,
                     name if path == "~" else f"{name} ({where}:{line})"))
    total = sum(own for _, own, _ in rows)
    lines = [f"cProfile of the worker ({done:,} jobs): {total:.0f} µs of profiled time per "
             "job. Most calls per job:"]
    lines += [f"    {calls:6.1f}/job  {own:5.1f} µs  {name}"
              for calls, own, name in sorted(rows, reverse=True)[:top]]
    lines += ["", "Most own time per job:"]
    lines += [f"    {own:5.1f} µs  {calls:6.1f}/job  {name}"
              for calls, own, name in sorted(rows, key=lambda r: -r[1])[:top]]
    return "\n".join(lines)


AREAS = [("cogworker_async/", "cogworker_async (our code)"), ("redis/", "redis-py"),
         ("anyio/", "anyio"), ("json/", "json"), ("uvloop/", "uvloop (Python part)"),
         ("asyncio/", "asyncio (Python part)")]


def frame_area(frame: str) -> str:
    if frame.startswith("Runner.run (asyncio/runners.py"):
        return "event loop in C (uvloop: I/O, callbacks)"
    for marker, area in AREAS:
        if marker in frame:
            return area
    return "other"


def function_of(frame: str) -> str:
    """``name (path:line)`` -> ``name (path)``: a function, whatever its line."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else frame


def summarize_profile(raw: Path, marker: str, top: int = 12) -> str:
    """The samples whose stack holds ``marker`` (the event loop's thread for a worker:
    the heartbeat's and anyio's threads spend their time waiting, which py-spy does not
    always see as idle; the measured loop for a client)."""
    own: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or marker not in stack:
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        own[function_of(frames[-1])] += count
        areas[frame_area(frames[-1])] += count
        for function in {function_of(f) for f in frames}:
            if "cogworker_async/" in function:
                inclusive[function] += count
    if not total:
        return "(no samples)"

    def share(counter: Counter[str]) -> list[str]:
        return [f"    {100 * c / total:5.1f}%  {name}" for name, c in counter.most_common(top)]

    return "\n".join([f"{total} samples. Self time by area:", *share(areas), "",
                      "Self time by function:", *share(own), "",
                      "Inclusive time of cogworker_async functions:", *share(inclusive)])


# -- main ------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a short smoke run: small N, 1 run (noisy figures)")
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                        help=f"comma-separated, from {', '.join(SYSTEMS)}")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated, from {', '.join(SCENARIOS)}")
    parser.add_argument("--runs", type=int, help="runs per scenario (median reported)")
    parser.add_argument("--concurrency", type=int, default=10,
                        help="worker concurrency for no-op, latency and memory (default 10)")
    parser.add_argument("--embedded", action="store_true",
                        help="noop: run each worker embedded in its peer script (the "
                             "former mode) instead of its own CLI; skips processes")
    parser.add_argument("--profile", action="store_true",
                        help="also profile our worker's no-op processing with py-spy")
    parser.add_argument("--no-write", action="store_true",
                        help="don't write benchmarks/RESULTS.md")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"))
    args = parser.parse_args()
    unknown = [s for s in args.systems.split(",") if s not in SYSTEMS]
    unknown += [s for s in args.scenarios.split(",") if s and s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    return args


def attempt(errors: list[str], label: str, action: Any, *args: Any) -> dict[str, Any]:
    """Run one measurement; an error is recorded (and shown as such), never fatal."""
    try:
        metrics: dict[str, Any] = action(*args)
    except (ScenarioError, subprocess.CalledProcessError, OSError) as exc:
        errors.append(f"{label}: {exc}")
        log(f"  error: {exc}")
        return {}
    shown = {k: round(v, 2) if isinstance(v, float) else v
             for k, v in metrics.items() if not isinstance(v, dict)}
    log(f"  {shown}")
    return metrics


def measure(bench: Bench, systems: list[System], scenarios: list[str],
            errors: list[str]) -> tuple[dict[str, list[dict[str, Any]]],
                                        dict[str, dict[str, Any]]]:
    """Every scenario for every system, ``runs`` times (systems interleaved within a run,
    so a burst of noise on the machine is spread over all of them); then memory, once."""
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in systems}
    total = bench.sizes.runs
    for run in range(1, total + 1):
        for system in systems:
            runs[system.name].append({})
        for scenario in [s for s in scenarios
                         if s != "memory" and s not in OWN_SERVERS]:
            for system in systems:
                bench.redis.flush()
                log(f"run {run}/{total}: {scenario} / {system.name} ...")
                metrics = attempt(errors, f"{system.name} / {scenario} (run {run})",
                                  getattr(bench, scenario), system, run)
                runs[system.name][-1].update(metrics or {f"error_{scenario}": True})
        for system in systems:  # within a run: the same minutes of this machine
            done = runs[system.name][-1]
            if done.get("proc_rate") and done.get("noop_rate"):
                done["proc_scaling"] = done["proc_rate"] / done["noop_rate"]
            if done.get("rtt_rate") and done.get("noop_rate"):
                done["rtt_vs_direct"] = done["rtt_rate"] / done["noop_rate"]
    results = {name: median_of(done) for name, done in runs.items()}
    if "memory" in scenarios:
        for system in systems:
            log(f"memory / {system.name} ...")
            metrics = attempt(errors, f"{system.name} / memory", bench.memory, system)
            results[system.name].update(metrics or {"error_memory": True})
    return runs, results


def main() -> int:
    args = parse_args()
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    systems = [SYSTEMS[name] for name in args.systems.split(",")]
    scenarios = [name for name in SCENARIOS if name in args.scenarios.split(",")]
    command = "python benchmarks/run.py " + " ".join(sys.argv[1:])
    started = dt.datetime.now().astimezone()
    load_before = os.getloadavg()
    args.code = code_version()  # the tree measured (it may change while this runs)
    for system in systems:  # install everything first: no pip while measuring
        interpreter(system)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that Redis is stopped
    redis = RedisServer().start()
    bench = Bench(args, sizes, redis)
    errors: list[str] = []
    profile_text = ""
    args.proxy = None  # the proxy's own figures, for the report
    try:
        redis_version = redis.version()
        log(f"redis {redis_version} on {redis.url}; logs in {bench.logs}")
        if "noop_rtt" in scenarios:
            bench.proxy = RttProxy(redis.port, RTT_DELAY_MS, bench.logs / "rtt-proxy.log")
            try:
                args.proxy = proxy_figures(bench.proxy, sizes)
            except (ScenarioError, OSError, subprocess.SubprocessError) as exc:
                errors.append(f"rtt proxy's own figures: {exc}")
            log(f"rtt proxy on port {bench.proxy.port}: {args.proxy}")
        runs, results = measure(bench, systems, scenarios, errors)
        if args.profile:
            log("profiling our worker (py-spy) ...")
            try:
                profile_text = profile(bench)
            except ScenarioError as exc:
                profile_text = f"(profile failed: {exc})"
    finally:
        if bench.proxy is not None:
            bench.proxy.stop()
        redis.stop()
    (cluster_text, durability_text, metrics_text, flow_text, handoff_text, ordering_text,
     outbox_text) = own_scenarios(args, sizes, bench, errors, scenarios)
    finished = dt.datetime.now().astimezone()
    report = render(args, sizes, systems, results, errors, command, started, finished,
                    load_before, os.getloadavg(), redis_version, profile_text,
                    cluster_text, durability_text, metrics_text, flow_text, ordering_text,
                    outbox_text, handoff_text)
    print(report)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    raw = RESULTS_DIR / f"{bench.stamp}.json"
    raw.write_text(json.dumps({"command": command, "sizes": dataclasses.asdict(sizes),
                               "runs": runs, "results": results, "errors": errors,
                               "rtt_proxy": args.proxy},
                              indent=1, default=str))
    if not args.no_write:
        Path(args.output).write_text(report + "\n")
        log(f"wrote {args.output} and {raw}")
    return 1 if errors else 0


def proxy_figures(proxy: RttProxy, sizes: Sizes) -> dict[str, Any]:
    """What the proxy itself does: the round trip of one PING at a time through it, and
    its ceiling (``redis-benchmark -c 50 -P 16 PING`` through it; None without
    redis-benchmark), so that a rate through it is known not to be its own limit."""
    return {"delay_ms": proxy.delay_ms, "round_trip_ms": proxy.round_trip_ms(),
            "ceiling_per_s": redis_benchmark(proxy.port, CEILING_CLIENTS, sizes.ceiling_n,
                                             "PING", pipeline=CEILING_PIPELINE)}


def own_scenarios(args: argparse.Namespace, sizes: Sizes, bench: Bench, errors: list[str],
                  scenarios: list[str]) -> tuple[str, str, str, str, str, str, str]:
    """The scenarios run by a script of their own (``OWN_SERVERS``), each one's Markdown
    ("" where it was not asked for, or failed)."""
    if OURS not in args.systems.split(","):
        return "", "", "", "", "", "", ""
    texts = dict.fromkeys(OWN_SERVERS, "")
    if "cluster" in scenarios:
        texts["cluster"] = run_cluster(args, sizes, bench, errors)
    if "durability" in scenarios:
        texts["durability"] = run_durability(args, sizes, bench, errors)
    for name, what, script in (
            ("metrics", "metrics off vs on (metrics_port)", METRICS_SCRIPT),
            ("flow", "queue limits and limiters vs plain", FLOW_SCRIPT),
            ("handoff", "workflow hand-offs: dependency, batch callback, chain",
             HANDOFF_SCRIPT),
            ("ordering", "priorities and groups vs plain", ORDERING_SCRIPT),
            ("outbox", "the outbox relay's lag", OUTBOX_SCRIPT)):
        if name in scenarios:
            texts[name] = run_script(name, what, script, args, bench, errors)
    return (texts["cluster"], texts["durability"], texts["metrics"], texts["flow"],
            texts["handoff"], texts["ordering"], texts["outbox"])


def run_cluster(args: argparse.Namespace, sizes: Sizes, bench: Bench,
                errors: list[str]) -> str:
    """benchmarks/cluster.py with the project's venv (its own servers: a 3-master
    cluster and one Redis); its Markdown tables, or "" after an error."""
    log("cluster: 6 queues on a 3-master cluster vs one Redis ...")
    raw = bench.logs / "cluster.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    argv = [str(ensure_our_python()), str(CLUSTER_SCRIPT), "--runs", str(sizes.runs),
            "--json", str(raw), *(["--quick"] if args.quick else [])]
    with open(bench.logs / "cluster.log", "w") as stderr:
        done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr,
                              text=True, timeout=3600)
    if done.returncode != 0:
        errors.append(f"cluster: exited with {done.returncode} "
                      f"(see {bench.logs / 'cluster.log'})")
        return ""
    return done.stdout.strip()


def run_durability(args: argparse.Namespace, sizes: Sizes, bench: Bench,
                   errors: list[str]) -> str:
    """benchmarks/durability.py with the project's venv (its own servers: a master and
    a replica, and Valkey with AOF); its Markdown table, or "" after an error."""
    log("durability: off vs 'replica' and 'aof' ...")
    raw = bench.logs / "durability.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    argv = [str(ensure_our_python()), str(DURABILITY_SCRIPT), "--runs", str(sizes.runs),
            "--json", str(raw), *(["--quick"] if args.quick else [])]
    with open(bench.logs / "durability.log", "w") as stderr:
        done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr,
                              text=True, timeout=3600)
    if done.returncode != 0:
        errors.append(f"durability: exited with {done.returncode} "
                      f"(see {bench.logs / 'durability.log'})")
        return ""
    return done.stdout.strip()


def run_script(name: str, what: str, script: Path, args: argparse.Namespace, bench: Bench,
               errors: list[str]) -> str:
    """A scenario's own script with the project's venv (its own number of runs, which
    its noise needs, unless ``--runs`` says); its Markdown, or "" after an error."""
    log(f"{name}: {what} ...")
    raw = bench.logs / f"{name}.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    argv = [str(ensure_our_python()), str(script), "--json", str(raw),
            *(["--quick"] if args.quick else []),
            *(["--runs", str(args.runs)] if args.runs else [])]
    with open(bench.logs / f"{name}.log", "w") as stderr:
        done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr,
                              text=True, timeout=3600)
    if done.returncode != 0:
        errors.append(f"{name}: exited with {done.returncode} "
                      f"(see {bench.logs / f'{name}.log'})")
        return ""
    return done.stdout.strip()


def render(args: argparse.Namespace, sizes: Sizes, systems: list[System],
           results: dict[str, dict[str, Any]], errors: list[str], command: str,
           started: dt.datetime, finished: dt.datetime, load_before: tuple[float, ...],
           load_after: tuple[float, ...], redis_version: str, profile_text: str,
           cluster_text: str = "", durability_text: str = "", metrics_text: str = "",
           flow_text: str = "", ordering_text: str = "", outbox_text: str = "",
           handoff_text: str = "") -> str:
    box = machine()
    kind = "QUICK smoke run (--quick: small N, 1 run)" if args.quick else \
        f"full run ({sizes.runs} runs, medians)"
    package_lines = []
    seen: set[str] = set()
    for system in systems:
        key = system.venv or "ours"
        if key in seen:
            continue
        seen.add(key)
        found = versions(interpreter(system), PACKAGES[key])
        package_lines.append(f"- {key}: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    lines = [
        "# Benchmarks: cogworker-async side by side with its peers",
        "",
        f"**{kind}.**" + (" These figures come from a short run on a shared, busy "
                          "machine: treat them as a smoke test of the harness, not as "
                          "results. Run `make bench` on a quiet machine for real numbers."
                          if args.quick else ""),
        "",
        f"- Command: `make bench` (= `.venv/bin/{command}`)" if not args.quick else
        f"- Command: `make bench BENCH_ARGS=--quick` (= `.venv/bin/{command}`)",
        f"- Date: {started:%Y-%m-%d %H:%M %Z} – {finished:%H:%M} "
        f"({(finished - started).total_seconds() / 60:.1f} min)",
        f"- Machine: {box['nproc']} cores ({box['cpu']}), {box['memory']} RAM, "
        f"Linux {box['kernel']}, Python {box['python']}; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after",
        f"- cogworker-async code: {args.code}",
        f"- Redis {redis_version}, private, on 127.0.0.1 (no persistence), "
        "uvloop in every asyncio process; no-op processing through each system's own "
        "CLI worker" + (" (here: --embedded, the worker inside the peer script)"
                        if args.embedded else "") + " (see Method)",
        *package_lines,
        "",
        "## Results",
        "",
        tables(results, systems, args.concurrency),
        "",
        "† stopped at the time cap (rate over the jobs done); g: no bulk API, each chunk's "
        "enqueue calls gathered concurrently; n/a: not applicable.",
        "",
        *proxy_note(args, results),
    ]
    target_table = targets(results)
    if target_table:
        lines += ["## Targets of the issue (ours)", "", target_table, ""]
    breakdown = idle_breakdown(results, systems)
    if breakdown:
        lines += ["## Idle worker: commands per second it sent to Redis (MONITOR)", "",
                  breakdown, ""]
    own_sections = [  # the scenarios run by a script of their own, in this order
        ("Redis Cluster: 3 masters vs one Redis (ours)", cluster_text),
        ("Durability: off vs 'replica' and 'aof' (ours)", durability_text),
        ("Prometheus metrics: off vs on (ours)", metrics_text),
        ("Flow control: queue limits and limiters vs plain (ours)", flow_text),
        ("Workflow hand-off (ours)", handoff_text),
        ("Who runs next: priorities and fair groups vs plain (ours)", ordering_text),
        ("Enqueue with the commit: the outbox relay's lag (ours)", outbox_text),
    ]
    for heading, text in own_sections:
        lines += [f"## {heading}", "", text, ""] if text else []
    if errors:
        lines += ["## Errors", "", *[f"- {e}" for e in errors], ""]
    if profile_text:
        lines += ["## Profile of our worker (py-spy, no-op jobs)", "", "```",
                  profile_text, "```", ""]
    lines += [method(sizes, args, systems)]
    return "\n".join(lines)


def proxy_note(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> list[str]:
    """The proxy's own figures under the results (``noop_rtt``)."""
    proxy = getattr(args, "proxy", None)
    if not proxy:
        return []
    fastest = max((r["rtt_rate"] for r in results.values() if r.get("rtt_rate")),
                  default=None)
    ceiling = proxy.get("ceiling_per_s")
    return [f"Round-trip proxy (`benchmarks/rtt_proxy.py`, {proxy['delay_ms']:g} ms each "
            f"way): one PING at a time through it took {proxy['round_trip_ms']:.2f} ms "
            "there and back; its own ceiling, `redis-benchmark -c "
            f"{CEILING_CLIENTS} -P {CEILING_PIPELINE} PING` through it: "
            + (f"{fmt(ceiling)} PINGs/s" if ceiling else "not measured (no redis-benchmark)")
            + (f", against {fmt(fastest)} jobs/s for the fastest system through it."
               if fastest else "."), ""]


def trivial_method(sizes: Sizes) -> str:
    tool = (f"`redis-benchmark -p PORT -c {TRIVIAL_CLIENTS} -n {sizes.evalsha_n} EVALSHA "
            "<sha> 0`" if shutil.which("redis-benchmark") else
            f"a Python client of the driver's (redis-benchmark is not installed here): "
            f"{TRIVIAL_CLIENTS} connections, a thread each, each calling its share of "
            f"{sizes.evalsha_n:,} `EVALSHA <sha> 0` one at a time, as redis-benchmark's "
            f"`-c {TRIVIAL_CLIENTS}` does")
    return (
        "- **Redis CPU / job ÷ one trivial EVALSHA** (issue 43's target: ≤ 0.5× for ours): "
        "right after each system's no-op run (its workers stopped), on the same private "
        f"server, `SCRIPT LOAD \"{TRIVIAL_SCRIPT}\"` then {tool}; the trivial call's "
        "Redis CPU = the server's INFO cpu (`used_cpu_user` + `used_cpu_sys`) delta over "
        "those calls ÷ their number, measured the same way as Redis' CPU per job. The "
        "ratio is taken run by run (each system beside its own measurement of the "
        "trivial call), then the median. A trivial call's cost is mostly its network "
        "I/O (read, parse, reply, write): a job below 1× shares a call among several "
        "jobs.")


def rtt_method(sizes: Sizes, args: argparse.Namespace) -> str:
    return (
        f"- **no-op processing, {RTT_DELAY_MS:g} ms each way** (`noop_rtt`; issue 43's "
        "target: ≥ 5× the best peer): a loopback TCP proxy (`benchmarks/rtt_proxy.py`, "
        "asyncio, standard library, one process started by the driver in front of the "
        "private Redis) delays every chunk it reads by "
        f"{RTT_DELAY_MS:g} ms before writing it on, in each direction, keeping each "
        "direction's order (a queue of due times per direction and connection; no netem "
        "in this kernel); it forwards bytes, so pipelines, blocking calls and pub/sub "
        f"pass. Then `noop` over {sizes.rtt_n:,} jobs (cap {sizes.rtt_cap:.0f} s, † when "
        "stopped there: the rate over the jobs done), the prefill and the worker "
        "(the same CLI command as `noop`" + (", here embedded" if args.embedded else "")
        + ") both connected to the proxy's port; the same measure as `noop`, and Redis' "
        "CPU from the server itself. ↳ through the proxy ÷ direct is taken run by run. "
        "The proxy's own round trip (one PING at a time) and its ceiling ("
        f"`redis-benchmark -c {CEILING_CLIENTS} -P {CEILING_PIPELINE} PING` through it) "
        "are printed under the results, so that a rate through it is known not to be "
        "its limit. The proxy takes CPU on the same 2 cores as the worker and Redis.")


def started_as(systems: list[System], concurrency: int) -> list[str]:
    """How each system's worker was started for ``noop`` and ``processes``: the very
    command lines ``cli_workers`` ran (``$URL``: the private Redis), and the settings."""
    lines = []
    for system in systems:
        c = min(concurrency, system.max_concurrency)
        one = cli_workers.describe(system.venv, system.mode, 1, c)
        fleet = cli_workers.describe(system.venv, system.mode, FLEET, c).split(" — ")[0]
        lines.append(f"- **{system.name}**: {one}. {FLEET} processes: {fleet}.")
    return lines


def noop_method(sizes: Sizes, args: argparse.Namespace, systems: list[System]) -> list[str]:
    """The no-op and processes bullets, and how each worker was started."""
    if args.embedded:
        return [f"- **no-op processing** (`--embedded`): {sizes.noop_n:,} jobs queued first "
                f"(bulk), then one worker at concurrency {args.concurrency}, embedded in "
                f"the peer script, runs until all ran (cap {sizes.noop_cap:.0f} s): jobs/s "
                "from the first job's start to the last one's, the worker's CPU per job "
                "(from its start) and Redis' CPU per job (INFO cpu). `processes`: not run."]
    return [
        f"- **no-op processing**: {sizes.noop_n:,} jobs queued first (bulk), then the "
        "system's worker started as its users start it, through its own CLI, as one "
        f"process at concurrency {args.concurrency} (commands below); it runs until all "
        f"ran (cap {sizes.noop_cap:.0f} s). Each job stamps its start in a slot its "
        "process shares with the driver (a memory write, `benchmarks/cli_workers.py`): "
        "jobs/s = (jobs − 1) ÷ (last job's start − first job's start), so the CLI's "
        "imports and start-up are left out. Worker CPU per job: every process of the "
        "worker (`/proc/<pid>/task/*/schedstat`), each job process from just before its "
        "first job, any other (a supervisor, a pool's parent) from the first job, to the "
        "last; Redis' CPU per job (INFO cpu) over the same window. ↳ start to first job: "
        "from starting the command (imports included).",
        f"- **processes**: the same over {sizes.proc_n:,} jobs with {FLEET} worker "
        f"processes (concurrency {args.concurrency} each) through each system's own "
        f"multi-process mode (arq has none: {FLEET} `arq` commands side by side). The "
        f"window opens when the driver sees that all {FLEET} processes have started a "
        "job (it looks every 2 ms; a fleet's processes start some hundred ms apart, "
        "which a short run would otherwise measure): jobs/s = jobs started after that ÷ "
        "(last job's start − then), CPU of every process (a supervisor or a pool's "
        f"parent included) and Redis' from then. ↳ {FLEET} processes ÷ 1 is each "
        "system's own scaling, taken run by run against its no-op figure. Stopping: "
        "SIGINT to each command's process group (a terminal's Ctrl-C), after the "
        "measurement.",
        "",
        "How each worker was started (`cd benchmarks/peers`, with `BENCH_REDIS_URL`, "
        "`BENCH_MODE`, `BENCH_CONCURRENCY` and `BENCH_SLOTS` in the environment, which "
        "the `*_app.py` modules read; every system logs at WARNING, so none writes a line "
        "per job):",
        "",
        *started_as(systems, args.concurrency),
        "",
        "The other scenarios run each worker embedded in its peer script (its real worker "
        "class, as each CLI runs it), which they need to signal readiness and report "
        "latencies.",
    ]


def method(sizes: Sizes, args: argparse.Namespace, systems: list[System]) -> str:
    notes = [f"- {s.name}: {s.note}" for s in systems if s.note]
    return "\n".join([
        "## Method",
        "",
        "Each system runs through its own idiomatic API and its real worker class, "
        "from small scripts (`benchmarks/peers/<system>_peer.py`, and the "
        "`<system>_app.py` its CLI imports) run with that system's own venv; logging at "
        "WARNING everywhere. Every job takes one float (its enqueue time). Redis is "
        "flushed before every measurement. Wall time and CPU cover only the measured "
        "part of each process, not its imports.",
        "",
        *noop_method(sizes, args, systems),
        "",
        trivial_method(sizes),
        rtt_method(sizes, args),
        f"- **enqueue, one at a time**: {sizes.enqueue_n:,} sequential awaited enqueues "
        "from one process.",
        f"- **bulk enqueue**: {sizes.bulk_n:,} jobs in calls of {sizes.bulk_chunk:,} "
        "(`enqueue_many` where the system has one, else `asyncio.gather`).",
        f"- **pick-up latency**: an idle worker (concurrency {args.concurrency}); after "
        f"{sizes.warmup:.0f} s, its Redis commands are counted for {sizes.idle_window:.0f} s "
        "(MONITOR: commands it sent, and those its Lua scripts ran; cross-checked with "
        "INFO `total_commands_processed` deltas, which count both) along with its CPU "
        "(/proc), then "
        f"{sizes.probes} jobs are enqueued one at a time, {1000 * sizes.probe_interval:.0f}"
        " ms apart; latency = job start − time just before the enqueue call.",
        f"- **sleep**: {sizes.sleep_n:,} jobs of `asyncio.sleep({sizes.sleep_ms / 1000:g})` "
        f"queued first, one worker at concurrency {sizes.sleep_concurrency}: seconds from "
        "the worker's start to the last job's end (ideal 1.0 s).",
        f"- **memory**: Redis `used_memory` delta over {sizes.mem_ours:,} queued jobs "
        f"(ours; {sizes.mem_peers:,} for peers), then a worker's RSS after running "
        f"{sizes.mem_processed:,} of them, vs its RSS with only those "
        f"{sizes.mem_processed:,} queued.",
        "- **cluster** (ours): no-op jobs on 6 queues, 2 hashing to each master of a "
        "3-master cluster (no replicas), vs the same on one Redis; 2 worker processes; "
        "Redis CPU per job per shard, and one Redis' ceiling (1 / Redis CPU per job) from "
        "1, 2 and 3 workers (see `benchmarks/cluster.py`).",
        "- **durability** (ours): `durability=\"replica\"` on a master with one replica "
        "(in sync) and `\"aof\"` on Valkey with `appendonly yes` (`appendfsync` "
        "everysec and always), each against durability off on the same servers in the "
        "same run: concurrent enqueue rate, sequential enqueue latency, `enqueue_many`, "
        "one worker's no-op processing and enqueue → start latency (see "
        "`benchmarks/durability.py`).",
        "- **metrics** (ours): one worker's no-op processing with `metrics_port` unset "
        "and set, back to back in each run (order alternating), `/metrics` scraped every "
        "0.5 s while on; jobs/s and worker CPU per job, and on ÷ off against the target "
        "of at most 10 % (see `benchmarks/metrics_cost.py`).",
        "- **flow** (ours): one worker's no-op processing with the defaults, with a "
        "queue limit that never binds (8 other processes registered in the queue's slot: "
        "its fetch counts 9 lists), and with each job inside a limiter that never binds "
        "(concurrent, window, bucket), back to back in each run (order rotating); jobs/s, "
        "worker and Redis CPU per job, each ÷ the defaults (see "
        "`benchmarks/flow_cost.py`).",
        "- **handoff** (ours): an embedded worker with the defaults (`poll_interval` not "
        "shortened, `track_jobs=True`), one hand-off at a time: a dependent's start after "
        "its parent's end (parent and dependent on one queue, and on two), a batch's "
        "`on_complete` callback's start after its last member's end, and a 10-step "
        "chain of no-op jobs from its enqueue call to its last step's end; p50/p99 against "
        "the issue's targets (see `benchmarks/handoff.py`).",
        "- **ordering** (ours): one worker's no-op processing with every job at priority "
        "0, with the jobs spread over three priorities (default aging, and strict), and "
        "over 100 fair groups, "
        "back to back in each run (order rotating); jobs/s, worker and Redis CPU per job, "
        "each ÷ the plain side (see `benchmarks/ordering_cost.py`).",
        "- **outbox** (ours): jobs written with `outbox.enqueue`, one commit at a time at "
        "a steady rate, relayed and run by one worker: p50/p99 of commit → job start (see "
        "`benchmarks/outbox_lag.py`).",
        "",
        "Ratios are ours ÷ peer for rates and peer ÷ ours for times, CPU, latency, calls "
        "and memory: above 1 means ours is better.",
        *(["", *notes] if notes else []),
        "",
        "Run it: `make bench` (full: 3 runs, about an hour), "
        "`make bench BENCH_ARGS=--quick` (a smoke run of a few minutes), or "
        "`.venv/bin/python benchmarks/run.py --help`.",
    ])


if __name__ == "__main__":
    sys.exit(main())
