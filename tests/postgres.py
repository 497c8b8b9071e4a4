"""A private PostgreSQL server for the outbox tests: its own cluster in a temporary
directory, on a free port, started with the binaries this machine has (Debian's
``/usr/lib/postgresql/<version>/bin``, or ``initdb`` on the PATH) and stopped by its own
pid; never the machine's server. Where there are no binaries the tests that need one
skip, saying so. PostgreSQL refuses to run as root: as root, the cluster runs as the
``postgres`` user (Debian's package makes it)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from tests.servers import free_port

START_TIMEOUT: Final = 30.0
"""Seconds ``pg_ctl start -w`` may take (an initdb'd cluster on a busy 2-core box)."""


def binaries() -> Path | None:
    """The directory of ``initdb``, ``pg_ctl`` and ``postgres``; None if none."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def why_not() -> str | None:
    """Why no private server can start here (the skip's reason), or None."""
    if binaries() is None:
        return "no PostgreSQL binaries (apt-get install postgresql): the outbox's " \
               "PostgreSQL tests skip; its SQLite tests run"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a 'postgres' user to run PostgreSQL as"
    return None


@contextmanager
def private_postgres() -> Iterator[str]:
    """A started private server: yields its SQLAlchemy URL path part
    (``user@127.0.0.1:port/postgres``, trust authentication)."""
    bin_dir = binaries()
    assert bin_dir is not None, why_not()
    root = Path(tempfile.mkdtemp(prefix="cogworker-pg-"))
    data, port = root / "data", free_port()
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.getuid()).pw_name
    as_user = ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []
    if os.geteuid() == 0:
        shutil.chown(root, user)
    subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", user,
                    "--auth=trust", "--no-sync"], check=True, capture_output=True)
    log = root / "server.log"
    subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log),
                    "-w", "-t", str(int(START_TIMEOUT)), "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
                    "start"], check=True, capture_output=True)
    pid = int((data / "postmaster.pid").read_text().split()[0])
    try:
        yield f"{user}@127.0.0.1:{port}/postgres"
    finally:
        _stop(pid)
        shutil.rmtree(root, ignore_errors=True)


def _stop(pid: int) -> None:
    """Stop the server by its pid: a fast shutdown, then a kill if it lingers."""
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
