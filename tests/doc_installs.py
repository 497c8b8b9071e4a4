"""What a docs page tells its reader to install, what its examples need, and a venv that
holds only the former (``tests/test_doc_examples.py`` runs the examples in it).

A page names what it installs with ``pip install ...``, in a shell block or inline
(``pip install './cogworker-async[web]'``): this package, with extras, and other
distributions. What its runnable blocks need is read from them: each top-level import
(mapped to its distribution by this venv's metadata: ``yaml`` is PyYAML), pytest for a
``pytest`` block, uvicorn for a ``serve`` block, pytest-asyncio for a ``pytest.ini``
that sets ``asyncio_*``, and the driver a SQLAlchemy URL names (``sqlite+aiosqlite://``).
A need is met when a named distribution, or one it requires, provides it.

The static check is cheap and names the missing distribution; the venv run is the proof
(an import hidden from the check, an option only a newer version has). A venv is built
once per install set and kept under ``.venv/doc-venvs/`` by its hash (``make clean``
removes them); the tree's own wheel goes into it again whenever the tree has changed, so
the code under test is always the tree's.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Final

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT: Final = Path(__file__).resolve().parent.parent
PACKAGE: Final = "cogworker-async"
VENVS: Final = ROOT / ".venv" / "doc-venvs"
INSTALL_TIMEOUT: Final = 300.0
"""Seconds for one venv's creation and install (peers come from the package index)."""

_PIP: Final = (sys.executable, "-m", "pip")
_PIP_INSTALL: Final = re.compile(r"pip install ([^`\n#]+)")
_TOKEN: Final = re.compile(r"^(?P<name>[\w./-]+?)(?:\[(?P<extras>[^\]]*)\])?(?P<rest>[^\[\]]*)$")
_DRIVER: Final = re.compile(r"\b(?:sqlite|postgresql|mysql|mariadb|mssql|oracle)\+(?P<driver>\w+)://")
_OPTIONS_WITH_VALUE: Final = frozenset({"-r", "--requirement", "-c", "--constraint",
                                        "-i", "--index-url", "--extra-index-url"})


@dataclass(frozen=True, slots=True)
class Install:
    """What a page names: this package's extras and the other requirements."""

    extras: frozenset[str]
    others: frozenset[str]

    def names(self) -> frozenset[str]:
        """Every distribution the install puts in a venv (canonical names)."""
        return frozenset(_closure([PACKAGE], self.extras)
                         | _closure([Requirement(o).name for o in self.others], frozenset()))

    def key(self) -> str:
        """The venv's cache key: the install, what pyproject makes of it, the Python."""
        ours = _pyproject_requirements(self.extras)
        blob = json.dumps([sorted(self.extras), sorted(self.others), ours, sys.version])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def describe(self) -> str:
        extras = f"[{','.join(sorted(self.extras))}]" if self.extras else ""
        return " ".join([f"{PACKAGE}{extras}", *sorted(self.others)])


def named(text: str) -> Install:
    """The install a page's ``pip install`` lines name (this package always: every page
    assumes the getting-started install)."""
    extras: set[str] = set()
    others: set[str] = set()
    for line in _PIP_INSTALL.findall(text):
        for token in _targets(_split(line)):
            parts = _TOKEN.match(token)
            if parts is None:
                raise AssertionError(f"cannot read the install target {token!r}")
            if parts["name"] == "." or parts["name"].rstrip("/").endswith(PACKAGE):
                extras.update(e.strip() for e in (parts["extras"] or "").split(",") if e.strip())
            else:
                others.add(token)
    return Install(frozenset(extras), frozenset(others))


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # ``'name @ git+<the repository's URL>'``: a placeholder's quote
        return re.sub(r"\s+@\s+.*", "", line).replace("'", "").replace('"', "").split()


def _targets(tokens: list[str]) -> Iterator[str]:
    skip = False
    for token in (t.partition(" @ ")[0].strip() for t in tokens):
        if skip or token == "@":  # ``name @ url``: the name was the target
            skip = token == "@"
            continue
        if token in _OPTIONS_WITH_VALUE:
            skip = True
        elif not token.startswith("-") and "://" not in token and "+" not in token:
            yield token


def needed(sources: Iterable[tuple[str, str]], local: set[str]) -> dict[str, set[str]]:
    """Distribution -> the files that need it, from ``(path, text)`` of a page's runnable
    files; ``local`` holds the top-level names the page's own files provide."""
    needs: dict[str, set[str]] = {}
    for path, text in sources:
        found: set[str] = set()
        if path.endswith(".py"):
            found |= {_distribution(m) for m in _imports(text)
                      if m not in sys.stdlib_module_names and m not in local}
        elif Path(path).name in ("pytest.ini", "setup.cfg", "pyproject.toml", "tox.ini"):
            found |= {"pytest"} | ({"pytest-asyncio"} if "asyncio_" in text else set())
        found |= {_distribution(m["driver"]) for m in _DRIVER.finditer(text)}
        for name in found - {"__future__"}:
            needs.setdefault(name, set()).add(path)
    return needs


def _imports(text: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found


def _distribution(module: str) -> str:
    if module == "cogworker_async_pytest":
        return PACKAGE
    providers = _providers().get(module, [module])
    return canonicalize_name(providers[0])


@cache
def _providers() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())  # a walk of every installed file: once


@cache
def _pyproject() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def _pyproject_requirements(extras: frozenset[str]) -> list[str]:
    unknown = extras - _pyproject().keys()
    if unknown:
        raise AssertionError(f"no such extra of {PACKAGE}: {sorted(unknown)}")
    return [r for extra in ["", *sorted(extras)] for r in _pyproject()[extra]]


def _requires(name: str, extras: frozenset[str]) -> list[Requirement]:
    """What ``name`` with ``extras`` requires here (ours: by pyproject, which may be newer
    than this venv's install of it)."""
    if canonicalize_name(name) == PACKAGE:
        lines = _pyproject_requirements(extras)
    else:
        try:
            lines = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            return []
    return [r for r in map(Requirement, lines) if r.marker is None
            or any(r.marker.evaluate({"extra": extra}) for extra in {"", *extras})]


def _closure(roots: list[str], extras: frozenset[str]) -> set[str]:
    """The distributions ``roots`` install (ours with ``extras``), by the metadata of this
    venv, which holds every peer the docs name."""
    seen: set[tuple[str, frozenset[str]]] = set()
    stack = [(canonicalize_name(name), extras if canonicalize_name(name) == PACKAGE
              else frozenset()) for name in roots]
    while stack:
        item = stack.pop()
        if item not in seen:
            seen.add(item)
            stack.extend((canonicalize_name(r.name), frozenset(r.extras))
                         for r in _requires(*item))
    return {name for name, _ in seen}


# -- the venv ------------------------------------------------------------------------------


def venv_python(install: Install, wheel: Path) -> Path:
    """The python of a venv holding only ``install``, with the tree's ``wheel`` in it.

    Built once per install set (under a lock: several pytest processes may ask at
    once); ``--system-site-packages`` stays off, so nothing of this venv leaks in.
    """
    VENVS.mkdir(parents=True, exist_ok=True)
    folder = VENVS / install.key()
    python = folder / "bin" / "python"
    with (VENVS / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".complete").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build cut short
            # No pip in it either: this venv's pip installs into it (``--python``).
            _pip([sys.executable, "-m", "venv", "--without-pip", str(folder)], install)
            extras = f"[{','.join(sorted(install.extras))}]" if install.extras else ""
            _pip([*_PIP, "--python", str(python), "install", "-q", f"{wheel}{extras}",
                  *sorted(install.others)], install)
            (folder / ".complete").write_text(install.describe() + "\n")
        # The wheel builds reproducibly: the same tree, the same hash, nothing to reinstall.
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        stamp = folder / ".wheel"
        if not stamp.exists() or stamp.read_text() != digest:
            _pip([*_PIP, "--python", str(python), "install", "-q", "--no-deps",
                  "--force-reinstall", str(wheel)], install)
            stamp.write_text(digest)
    return python


def build_wheel(into: Path) -> Path:
    """The tree's own wheel (a local build: no index needed for this package)."""
    _pip([*_PIP, "wheel", "-q", "--no-deps", "-w", str(into),
          str(ROOT)], None)
    (wheel,) = into.glob("cogworker_async-*.whl")
    return wheel


def _pip(command: list[str], install: Install | None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
                          check=False)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}"
        f"{f' (installing {install.describe()})' if install else ''}\n{done.stderr[-3000:]}")
