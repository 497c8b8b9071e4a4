"""The lab itself (netlab.py, latency.py): its faults do what the scenarios rely on.

- A partition stops traffic: a request on an open connection gets no reply and a new
  connection cannot be made, while the control link keeps working; healing delivers
  the held request (TCP retransmits it) and new connections work again.
- 5 % loss loses some datagrams but not all, each way, at about that rate.
- Dropping only what ``srv`` sends a peer lets the peer's requests through: they run.
- The latency proxy adds 20–50 ms each way.
- Teardown leaves no namespace or device behind; leftovers of dead runs are cleaned,
  a live run's are not.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Final

import pytest
import redis

from tests.worker.chaos.netns import netlab
from tests.worker.chaos.netns.netlab import Lab, Lines, tell
from tests.workerproc import ROOT

pytestmark = pytest.mark.timeout(60)

REPLY_TIMEOUT: Final = 10.0
"""Seconds a probe may take to answer the test (process start on a busy machine)."""
HELD_FOR: Final = 1.5
"""Seconds a request is shown to stay unanswered during a partition."""
DATAGRAMS: Final = 2000
LOSS_PERCENT: Final = 5
UDP_PORT: Final = 7400
PROXY_PORT: Final = 7401
PINGS: Final = 20

# A client in a peer namespace, driven line by line: "ping" on the connection it opened
# first, "connect" on a new one (1 s to connect). Replies "ok <seconds>" or "fail <why>".
PROBE: Final = r"""
import sys, time, redis
from redis.backoff import NoBackoff
from redis.retry import Retry
url = sys.argv[1]
def client(timeout):
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=1,
                                retry=Retry(NoBackoff(), 0))
held = client(60)
held.ping()
print("ready", flush=True)
for line in sys.stdin:
    began = time.monotonic()
    try:
        if line.strip() == "ping":
            held.ping()
        else:
            fresh = client(1)
            fresh.ping()
            fresh.close()
        print(f"ok {time.monotonic() - began:.3f}", flush=True)
    except redis.RedisError as exc:
        print(f"fail {type(exc).__name__}", flush=True)
"""

# A client in a peer namespace: INCR "seen" once per line on stdin, "ok" after each.
COUNTER: Final = r"""
import sys, redis
from redis.backoff import NoBackoff
from redis.retry import Retry
r = redis.Redis.from_url(sys.argv[1], socket_timeout=60, retry=Retry(NoBackoff(), 0))
r.set("seen", 0)
print("ready", flush=True)
for line in sys.stdin:
    r.incr("seen")
    print("ok", flush=True)
"""

# Counts the datagrams reaching HOST:PORT; prints the count once none came for 1 s.
RECEIVER: Final = r"""
import socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: all fit
sock.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
count = 0
sock.settimeout(None)
while True:
    try:
        sock.recv(64)
    except TimeoutError:
        break
    count += 1
    sock.settimeout(1.0)
print(count, flush=True)
"""

# Sends, for each line N on stdin, N datagrams to HOST:PORT; prints "sent N".
SENDER: Final = r"""
import socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for line in sys.stdin:
    n = int(line)
    for _ in range(n):
        sock.sendto(b"x" * 32, (sys.argv[1], int(sys.argv[2])))
    print(f"sent {n}", flush=True)
"""

# Times PINGS round trips to URL: one line of seconds each.
PINGER: Final = r"""
import sys, time, redis
r = redis.Redis.from_url(sys.argv[1])
r.ping()
for _ in range(int(sys.argv[2])):
    began = time.monotonic()
    r.ping()
    print(f"{time.monotonic() - began:.4f}", flush=True)
"""


def python(lab: Lab, ns: str, script: str, *args: str) -> tuple[subprocess.Popen[bytes], Lines]:
    process = lab.spawn(ns, [sys.executable, "-c", script, *args], cwd=ROOT,
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    return process, Lines(process)


def expect(lines: Lines, prefix: str, timeout: float = REPLY_TIMEOUT) -> str:
    line = lines.next(timeout)
    assert line is not None, f"expected {prefix!r}, got nothing"
    assert line.startswith(prefix), f"expected {prefix!r}, got {line!r}"
    return line


def test_partition_stops_traffic_and_heal_restores_it(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(["peer"])
    link = lab.link("peer")
    probe, lines = python(lab, link.ns, PROBE, link.redis_url)
    expect(lines, "ready")
    control = redis.Redis.from_url(lab.control_url)
    try:
        lab.partition(link)
        tell(probe, "connect")  # a new connection cannot be made
        assert expect(lines, "fail") in ("fail ConnectionError", "fail TimeoutError")
        tell(probe, "ping")  # on the open connection: sent, never answered
        assert lines.next(HELD_FOR) is None
        assert control.ping()  # the control link is not faulted
        held = lab.counts(link)
        lab.heal(link)
        answered = expect(lines, "ok")  # the held PING, retransmitted after the heal
        assert float(answered.split()[1]) >= HELD_FOR
        tell(probe, "connect")
        expect(lines, "ok")
        tell(probe, "ping")
        expect(lines, "ok")
    finally:
        control.close()
    assert held["to_srv"].dropped > 0
    assert held["to_srv"].dropped == held["to_srv"].seen
    assert held["to_peer"].dropped == held["to_peer"].seen


@pytest.mark.parametrize("direction", ["to_srv", "to_peer"])
def test_loss_loses_some_packets_but_not_all(make_lab: Callable[..., Lab],
                                             direction: str) -> None:
    lab = make_lab(["peer"])
    link = lab.link("peer")
    if direction == "to_srv":
        to_ns, to_addr, from_ns = lab.srv, link.srv_addr, link.ns
    else:
        to_ns, to_addr, from_ns = link.ns, link.peer_addr, lab.srv
    _, received = python(lab, to_ns, RECEIVER, to_addr, str(UDP_PORT))
    expect(received, "ready")
    sender, sent = python(lab, from_ns, SENDER, to_addr, str(UDP_PORT))
    tell(sender, "1")  # before the fault: the link's neighbours are resolved
    expect(sent, "sent 1")
    lab.lose(link, LOSS_PERCENT)
    tell(sender, str(DATAGRAMS))
    expect(sent, f"sent {DATAGRAMS}")
    arrived = int(expect(received, "")) - 1
    counts = lab.counts(link)[direction]
    lost = DATAGRAMS - arrived
    print(f"loss {direction}: {lost}/{DATAGRAMS} datagrams lost; nft {counts}")
    assert 0 < lost < DATAGRAMS
    # 5 % of 2,000: 100 expected, sd ~10; these bounds are 8 sd away.
    assert DATAGRAMS * 0.01 < lost < DATAGRAMS * 0.10
    assert counts.dropped >= lost  # every loss was this rule's (plus any ARP it dropped)


def test_dropping_replies_lets_requests_through(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(["peer"])
    link = lab.link("peer")
    probe, lines = python(lab, link.ns, COUNTER, link.redis_url)
    expect(lines, "ready")
    control = redis.Redis.from_url(lab.control_url)
    try:
        lab.fault(link, to_peer=netlab.drop_all)
        tell(probe, "ping")

        def ran() -> bool:
            return control.get("seen") == b"1"

        deadline = time.monotonic() + REPLY_TIMEOUT
        while not ran():
            assert time.monotonic() < deadline, "the request never reached Redis"
            time.sleep(0.01)
        assert lines.next(HELD_FOR) is None  # ran, and its reply is lost
        lab.heal(link)
        expect(lines, "ok")
        assert control.get("seen") == b"1"  # retransmissions never ran it twice
    finally:
        control.close()


def test_latency_proxy_adds_20_to_50_ms_each_way(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(["peer"])
    link = lab.link("peer")
    ready = lab.dir / "proxy.ready"
    lab.spawn(lab.srv, [sys.executable, "-m", "tests.worker.chaos.netns.latency",
                        f"{link.srv_addr}:{PROXY_PORT}", f"127.0.0.1:{netlab.REDIS_PORT}",
                        "20", "50", str(ready)], cwd=ROOT, memory_bytes=1 << 30)
    deadline = time.monotonic() + REPLY_TIMEOUT
    while not ready.exists():
        assert time.monotonic() < deadline, "the proxy did not start"
        time.sleep(0.01)
    _, lines = python(lab, link.ns, PINGER, f"redis://{link.srv_addr}:{PROXY_PORT}/0",
                      str(PINGS))
    rtts = [float(expect(lines, "")) for _ in range(PINGS)]
    print(f"round trips through the proxy: min {min(rtts):.3f} "
          f"median {statistics.median(rtts):.3f} max {max(rtts):.3f} s")
    assert min(rtts) >= 0.040
    assert statistics.median(rtts) < 0.150  # 2 x 50 ms, and the busy machine's share


def test_teardown_leaves_nothing_and_leftovers_of_dead_runs_go(
        make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(["a", "b"])
    tag = lab.tag
    assert len(netlab.lab_names(tag)[0]) == 3
    lab.destroy()
    assert netlab.lab_names(tag) == ([], [])

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead, live = f"{netlab.PREFIX}{gone.pid}a", f"{netlab.PREFIX}{os.getpid()}y"
    netlab.run("ip", "netns", "add", f"{dead}-srv")
    netlab.run("ip", "link", "add", f"{dead}p0", "type", "veth", "peer", "name", f"{dead}s0",
               "netns", f"{dead}-srv")
    netlab.run("ip", "netns", "add", f"{live}-srv")
    try:
        removed = netlab.clean_leftovers()
        assert f"{dead}-srv" in removed
        assert netlab.lab_names(dead) == ([], [])
        assert netlab.lab_names(live)[0] == [f"{live}-srv"]
    finally:
        for name in (f"{dead}-srv", f"{live}-srv"):
            if name in netlab.lab_names(name)[0]:
                netlab.run("ip", "netns", "del", name)
