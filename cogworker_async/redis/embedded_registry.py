"""The per-user registry of embedded servers: where each one this user started runs.

An embedded server outlives its starter and belongs to its folder (``embedded.py``), so
following guides in eight folders leaves eight servers nobody remembers. Each start
records one small file here (the data dir, the socket, the pid, when), and each
``stop`` removes it; ``embedded_fleet.py`` reads them back for ``embedded status --all``
and ``embedded stop --all``.

The registry is a hint, never trusted blindly: a server killed, or a machine rebooted,
leaves its file behind, and the pid in it may since name another process. Whoever reads
an entry proves it against the server itself (its socket answers, owned by us, with
that pid) before using it, and prunes it otherwise (``embedded_fleet.py``).

Recording is best effort: a home dir that cannot be written (a service user, a
read-only container) must never stop a server from starting, so every failure here is
logged and swallowed. The dir is ``$COGWORKER_EMBEDDED_REGISTRY`` (tests point it at a
temporary dir: they never touch a user's real one), else
``$XDG_CACHE_HOME/cogworker-async/embedded``, else ``~/.cache/...``: a cache dir, the same
in every process of this user (a runtime dir is not set in every session: cron, ssh).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from cogworker_async import environment

log = logging.getLogger(__name__)

SUBDIR: Final = Path("cogworker-async") / "embedded"
SUFFIX: Final = ".json"


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One server as its starter recorded it."""

    data_dir: str
    socket_path: str
    pid: int
    started_at: float
    """Epoch seconds of the server's start (the uptime of a server that no longer
    answers; what proves its pid was not reused since)."""


def command(args: str) -> str:
    """``cogworker-async <args>`` as the reader can type it where they are, for a message
    that tells them how to stop a server: after ``make run`` no ``cogworker-async`` is on
    PATH (it is in the demo's venv), and one on PATH may be another install's. The bare
    name when PATH finds this interpreter's script; else that script's path (relative
    when under the current folder: ``.venv/bin/cogworker-async``); else this
    interpreter's ``-m cogworker_async``."""
    script = Path(sys.executable).parent / "cogworker-async"
    found = shutil.which("cogworker-async")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return f"cogworker-async {args}"
    if script.exists():
        with contextlib.suppress(ValueError):  # not under the current folder: absolute
            script = script.relative_to(Path.cwd())
        return f"{shlex.quote(str(script))} {args}"
    return f"{shlex.quote(sys.executable)} -m cogworker_async {args}"


def directory() -> Path:
    """The registry's dir (not created here)."""
    explicit = environment.embedded_registry()
    if explicit:
        return Path(explicit)
    cache = environment.cache_home()
    return (Path(cache) if cache else Path.home() / ".cache") / SUBDIR


def _file_of(data_dir: Path | str) -> Path:
    # One file per data dir: a server started again there replaces the entry of the
    # one before it, so the registry never lists two servers for one folder.
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:24]
    return directory() / f"{digest}{SUFFIX}"


def record(data_dir: Path, socket_path: str, pid: int,
           started_at: float | None = None) -> None:
    """Note that this user runs a server for ``data_dir`` (replacing any entry of an
    earlier one there), started at ``started_at`` (epoch seconds; default now: the
    server's own start, which ``embedded_fleet`` compares a pid's process with). Written
    whole (a temp file renamed over), readable by this user only: a reader sees the old
    entry or the new one, never half of one."""
    when = time.time() if started_at is None else started_at
    entry = RegistryEntry(str(data_dir), socket_path, pid, when)
    try:
        target = _file_of(data_dir)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".entry-")
        try:
            with os.fdopen(fd, "w") as out:  # mkstemp made it 0600
                json.dump(asdict(entry), out)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
    except OSError as exc:
        log.warning("could not record the embedded server of %s in %s: %s "
                    "('embedded status --all' will not list it)", data_dir, directory(), exc)


def recorded_pid(data_dir: Path) -> int | None:
    """The pid the registry holds for ``data_dir``'s server, or None."""
    entry = _read(_file_of(data_dir))
    return entry.pid if entry is not None else None


def forget(data_dir: Path | str) -> None:
    """Drop ``data_dir``'s entry (its server stopped, or proved gone)."""
    with contextlib.suppress(OSError):
        _file_of(data_dir).unlink()


def entries() -> list[RegistryEntry]:
    """Every entry, unproven (see the module docstring), oldest start first. An
    unreadable file is removed: no start writes one (the rename is atomic)."""
    try:
        files = sorted(directory().glob(f"*{SUFFIX}"))
    except OSError:
        return []
    found = []
    for path in files:
        entry = _read(path)
        if entry is None:
            with contextlib.suppress(OSError):
                path.unlink()
        else:
            found.append(entry)
    return sorted(found, key=lambda e: e.started_at)


def _read(path: Path) -> RegistryEntry | None:
    try:
        raw = json.loads(path.read_text())
        return RegistryEntry(str(raw["data_dir"]), str(raw["socket_path"]), int(raw["pid"]),
                     float(raw["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
