"""Leftover servers (issue 45, item 9): every embedded server this user started is
listed by ``embedded status --all`` and stopped by ``embedded stop --all``, whatever its
folder; a plain script that starts one says so on stderr, once.

Real processes and the real binary. Each test has a registry of its own
(``COGWORKER_EMBEDDED_REGISTRY``, inherited by the processes it starts): nothing here
reads or writes the user's real one, nor sees another test's servers.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from cogworker_async.redis import embedded_registry
from cogworker_async.redis.embedded import EmbeddedServer
from tests.redis.test_embedded import (
    ROOT,
    Reaper,
    alive,
    ended_gracefully,
    gone,
    pytestmark,  # noqa: F401  (the same skips: Linux, a server binary)
    wait_for,
)

NOTICE = "cogworker-async: started an embedded server"

SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from cogworker_async import App
    from cogworker_async.redis.embedded import EmbeddedServer

    app = App(namespace="script", data_dir=sys.argv[1])

    @app.job
    async def noop() -> None: ...

    async def main() -> None:
        for _ in range(5):  # several commands, a pool of connections
            await noop.enqueue()
        await app.close()

    asyncio.run(main())
    EmbeddedServer(sys.argv[1]).start()  # another start in the same process: found
    print(app.redis_url())
""")


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    """Every server a test starts is stopped at its end (test_embedded.py's Reaper)."""
    tracked = Reaper()
    try:
        yield tracked
    finally:
        tracked.cleanup()


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "registry"
    monkeypatch.setenv("COGWORKER_EMBEDDED_REGISTRY", str(where))
    monkeypatch.delenv("COGWORKER_REDIS_URL", raising=False)
    return where


@pytest.fixture
def short() -> Iterator[Path]:
    """A short folder for the data dirs: a unix socket's path must fit in sun_path (107
    bytes), which pytest's tmp_path under xdist often does not (the tests were skipped)."""
    base = Path(tempfile.mkdtemp(prefix="cwf-", dir="/tmp"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def folder(base: Path, name: str) -> Path:
    d = base / name / ".cogworker"
    assert len(str(d / "redis.sock")) <= 100, d  # short: never skipped
    return d


def not_a_test() -> dict[str, str]:
    """This environment but PYTEST_CURRENT_TEST: a process run as a user runs it."""
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def script(data_dir: Path, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    """A plain script (not the CLI, not a test)."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir)], cwd=ROOT,
                          env=env or not_a_test(),
                          text=True, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cogworker_async", "embedded", *args],
                          cwd=ROOT, env={**not_a_test(), "COLUMNS": "300"}, text=True,
                          capture_output=True, timeout=60, check=False)


def pid_of(data_dir: Path) -> int:
    return int((data_dir / "server.pid").read_text())


def test_status_all_lists_every_folders_server_and_stop_all_stops_them(short: Path,
    reaper: Reaper, registry: Path, tmp_path: Path
) -> None:
    first, second = folder(short, "one"), folder(short, "two")
    for data_dir in (first, second):
        reaper.data_dirs.append(data_dir)
        script(data_dir)  # exits: its server runs on
    pids = {str(first): pid_of(first), str(second): pid_of(second)}
    assert all(alive(pid) for pid in pids.values())

    listed = cli("status", "--all", "--json")

    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {row["data_dir"]: row["pid"] for row in rows} == pids
    assert all(row["answering"] and row["rss_bytes"] > 0 for row in rows)
    assert all(row["url"] == f"unix://{row['data_dir']}/redis.sock" for row in rows)
    table = cli("status", "--all").stdout
    assert all(d in table and str(pid) in table for d, pid in pids.items()), table

    stopped = cli("stop", "--all")

    assert stopped.returncode == 0, stopped.stderr
    for data_dir, pid in pids.items():
        assert f"stopped the embedded server in {data_dir} (pid {pid})" in stopped.stdout
        wait_for(functools.partial(gone, pid), f"server {pid} gone")
        assert ended_gracefully(Path(data_dir), pid)  # SHUTDOWN: its data written out
    after = cli("status", "--all")
    assert (after.returncode, after.stdout.strip()) == (3, "no embedded server of yours is running")
    assert list(registry.glob("*.json")) == []


def test_stale_entries_are_pruned_and_their_pids_never_signalled(short: Path,
    reaper: Reaper, registry: Path, tmp_path: Path
) -> None:
    killed_dir, bystander_dir = folder(short, "killed"), folder(short, "reused")
    killed = reaper.server(killed_dir)
    killed.start()
    killed_pid = pid_of(killed_dir)
    os.kill(killed_pid, 9)  # a crash, a reboot: its entry stays behind
    wait_for(functools.partial(gone, killed_pid), "killed server gone")
    # An entry whose pid now names another process of this user (pid reuse).
    bystander = reaper.popen(["sleep", "60"])
    embedded_registry.record(bystander_dir, str(bystander_dir / "redis.sock"), bystander.pid)
    assert len(list(registry.glob("*.json"))) == 2

    listed = cli("status", "--all", "--json")
    stopped = cli("stop", "--all")

    assert (listed.returncode, json.loads(listed.stdout)) == (3, [])
    assert "no embedded server of yours was running" in stopped.stdout
    assert bystander.poll() is None  # not signalled
    assert list(registry.glob("*.json")) == []


def test_a_script_that_starts_one_says_so_on_stderr_once(short: Path,
    reaper: Reaper, registry: Path, tmp_path: Path
) -> None:
    data_dir = folder(short, "script")
    reaper.data_dirs.append(data_dir)

    first = script(data_dir)
    again = script(data_dir)  # it runs already: this script started nothing

    notices = [line for line in first.stderr.splitlines() if line.startswith(NOTICE)]
    assert len(notices) == 1, first.stderr
    assert str(data_dir) in notices[0]
    assert f"cogworker-async embedded stop --data-dir {data_dir}" in notices[0]
    # Not stop --all (every folder's server: another checkout's too), the list of them.
    assert "stop --all" not in notices[0]
    assert "cogworker-async embedded status --all" in notices[0]
    assert NOTICE not in again.stderr
    # The CLI says it its own way: no notice on its stderr.
    assert EmbeddedServer(data_dir).stop()
    started = cli("start", "--data-dir", str(data_dir))
    assert started.returncode == 0
    assert NOTICE not in started.stderr


STOP_IT: Final = re.compile(r"Stop it with '([^']+)'")


def test_the_notice_names_a_stop_command_that_works_where_the_user_is(short: Path,
    reaper: Reaper, registry: Path, tmp_path: Path
) -> None:
    """After ``make run`` the venv is not on PATH: the notice's command must still work
    typed as it is, from the folder the script ran in (issue 45)."""
    venv_bin = str(Path(sys.executable).parent)
    for name, on_path in (("off-path", False), ("on-path", True)):
        data_dir = folder(short, name)
        reaper.data_dirs.append(data_dir)
        rest = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d != venv_bin]
        env = {**not_a_test(), "PATH": os.pathsep.join([venv_bin] * on_path + rest)}
        started = script(data_dir, env)
        pid = pid_of(data_dir)
        said = STOP_IT.search(started.stderr)
        assert said is not None, started.stderr
        command = shlex.split(said[1])
        assert (command[0] == "cogworker-async") is on_path, said[1]

        stopped = subprocess.run(command, cwd=ROOT, env=env, text=True, capture_output=True,
                                 timeout=60, check=False)

        assert stopped.returncode == 0, (said[1], stopped.stderr)
        wait_for(functools.partial(gone, pid), f"server {pid} gone")


def test_the_command_falls_back_to_the_interpreter_without_a_script(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    python = tmp_path / "bin" / "python"  # an interpreter with no cogworker-async beside it
    monkeypatch.setattr(sys, "executable", str(python))

    assert embedded_registry.command("embedded stop") == (
        f"{python} -m cogworker_async embedded stop")


def test_all_takes_no_folder(registry: Path, tmp_path: Path) -> None:
    refused = cli("stop", "--all", "--data-dir", str(tmp_path))

    assert refused.returncode == 2
    assert "--all is every folder's server" in refused.stderr


def test_the_registry_is_overridable_and_not_the_users(
    registry: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert embedded_registry.directory() == registry
    monkeypatch.delenv("COGWORKER_EMBEDDED_REGISTRY")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert embedded_registry.directory() == tmp_path / "cache" / "cogworker-async" / "embedded"


def squatter(reaper: Reaper, data_dir: Path, binary: str) -> subprocess.Popen[bytes]:
    """A process that is not the server, working in ``data_dir`` (a shell there, a
    ``tail -f server.log``) and named by its ``server.pid``: a crashed server's file
    and its pid given again."""
    data_dir.mkdir(parents=True)
    proc = subprocess.Popen([binary, "60"], cwd=data_dir, stdin=subprocess.DEVNULL)
    reaper.processes.append(proc)
    (data_dir / "server.pid").write_text(f"{proc.pid}\n")
    return proc


def test_stop_all_never_signals_a_process_that_only_works_in_the_data_dir(short: Path,
    reaper: Reaper, registry: Path, tmp_path: Path
) -> None:
    data_dir = folder(short, "crashed")
    bystander = squatter(reaper, data_dir, "sleep")
    embedded_registry.record(data_dir, str(data_dir / "redis.sock"), bystander.pid)

    stopped = cli("stop", "--all")

    assert bystander.poll() is None  # alive: never signalled (it got SIGTERM before)
    assert "no embedded server of yours was running" in stopped.stdout, stopped
    assert list(registry.glob("*.json")) == []


def test_a_server_named_process_started_after_its_entry_is_not_signalled(short: Path,
    reaper: Reaper, registry: Path, tmp_path: Path
) -> None:
    # Named as a server binary, in the data dir, in server.pid: but the entry's server
    # started an hour before this process did, so its pid was reused since.
    data_dir = folder(short, "reused")
    named = tmp_path / "redis-server"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", named)  # a copy: /proc's exe names it
    bystander = squatter(reaper, data_dir, str(named))
    embedded_registry.record(data_dir, str(data_dir / "redis.sock"), bystander.pid,
                             time.time() - 3600)

    stopped = cli("stop", "--all")

    assert bystander.poll() is None
    assert list(registry.glob("*.json")) == []

    # Started when its entry says: that is the server, hung; it gets its SIGTERM.
    embedded_registry.record(data_dir, str(data_dir / "redis.sock"), bystander.pid)
    stopped = cli("stop", "--all")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the embedded server in {data_dir} (pid {bystander.pid})" in stopped.stdout
    assert bystander.wait(timeout=10) == -15
