"""The code in the README and the docs runs: a doc example that breaks fails the suite.

Every ``python`` block is marked, on the line before it, with what it is:

    <!-- example: sketch -->     a fragment, or code that needs what a test cannot have
                                 (another queue's library, a real mail server): it must
                                 still parse (top-level ``await`` allowed)
    <!-- example: file -->      saved in the page's example folder under the path its
                                 first line names (``# app/jobs.py``); a block of several
                                 files names each at its start (``# conftest.py``)
    <!-- example: run -->       a complete program: run (after the page's files so far
                                 are saved), it must exit 0 within a minute; top-level
                                 ``await`` runs on an event loop, as in ``python -m asyncio``
    <!-- example: pytest -->    test files: saved, then run by pytest, which must pass
    <!-- example: serve APP REQUEST -->   saved, then APP (``module:attribute``) served
                                 by uvicorn and REQUEST (``POST /path?query``) sent
                                 through it: it must answer 2xx

Blocks of other languages may be marked ``file`` too (a ``pytest.ini``). Each page runs
in a folder of its own, its blocks in order, on a private Redis server flushed between
pages (``COGWORKER_REDIS_URL``, so no embedded server is started), with the python of a
venv that holds only what the page names in its ``pip install`` lines (this package
built from the tree, with the extras it names, and the peers: ``tests/doc_installs.py``).
A page that uses what it does not name fails twice: the static check says which
distribution, the run how it broke.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import pytest
import redis

from tests import doc_installs
from tests.servers import ServerProcess, free_port

ROOT: Final = Path(__file__).resolve().parent.parent
PAGES: Final = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
KINDS: Final = ("sketch", "file", "run", "pytest", "serve")
TIMEOUT: Final = 60.0

_FENCE: Final = re.compile(
    r"^(?P<indent> *)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```",
    re.MULTILINE | re.DOTALL)
_MARK: Final = re.compile(r"<!--\s*example:\s*(?P<kind>\w+)(?P<rest>[^>]*?)\s*-->\s*$")
_NAME: Final = re.compile(r"^#\s*(?P<path>[\w./-]+\.(?:py|ini|toml|cfg|txt))\s*(?:#.*)?$")
RUNNER: Final = textwrap.dedent("""
    import ast, asyncio, sys
    source = open(sys.argv[1]).read()
    code = compile(source, sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, {"__name__": "__main__"})
    if result is not None:
        asyncio.run(result)
""")


@dataclass(frozen=True, slots=True)
class Block:
    page: Path
    line: int
    lang: str
    kind: str | None
    args: list[str]
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def files(self) -> list[tuple[str, str]]:
        """(path, text) of each file the block holds, named by its header lines."""
        found: list[tuple[str, list[str]]] = []
        for line in self.body.splitlines():
            named = _NAME.match(line)
            if named:
                found.append((named["path"], []))
            elif found:
                found[-1][1].append(line)
            elif line.strip():
                raise AssertionError(f"{self.where}: a file block must name its file on "
                                     f"its first line ('# app/jobs.py'), not {line!r}")
        return [(path, "\n".join(lines).strip("\n") + "\n") for path, lines in found]


def blocks(page: Path) -> list[Block]:
    text = page.read_text("utf-8")
    found = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        indent = len(match["indent"])
        body = "\n".join(line[indent:] for line in match["body"].splitlines())
        found.append(Block(page, text.count("\n", 0, match.start()) + 1, match["lang"],
                           mark["kind"] if mark else None,
                           shlex.split(mark["rest"]) if mark else [], body))
    return found


def every_block() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def pages_with_examples() -> list[Path]:
    return [page for page in PAGES
            if any(b.kind in ("file", "run", "pytest", "serve") for b in blocks(page))]


# -- every block is marked, and every sketch parses --------------------------------------


def test_every_python_block_says_whether_it_runs() -> None:
    unmarked = [b.where for b in every_block() if b.lang == "python" and b.kind is None]
    assert not unmarked, ("python blocks without '<!-- example: ... -->' on the line "
                          f"before (see tests/test_doc_examples.py): {unmarked}")
    unknown = [(b.where, b.kind) for b in every_block()
               if b.kind is not None and b.kind not in KINDS]
    assert not unknown


def test_every_sketch_parses() -> None:
    broken = []
    for block in every_block():
        if block.lang == "python" and block.kind == "sketch":
            try:
                ast.parse(block.body)
            except SyntaxError as exc:
                broken.append(f"{block.where} (+{exc.lineno}): {exc.msg}")
    assert not broken, broken


# -- every page names what its examples need ----------------------------------------------


def test_every_install_line_names_extras_that_exist() -> None:
    wrong = []
    for page in PAGES:
        try:
            doc_installs.named(page.read_text("utf-8")).key()  # reads pyproject's extras
        except AssertionError as exc:
            wrong.append(f"{page.relative_to(ROOT)}: {exc}")
    assert not wrong, wrong


# What a block kind runs on, besides what its code imports.
_RUNS_ON: Final = {"pytest": "import pytest\n", "serve": "import uvicorn\n"}


def _needs(page: Path) -> dict[str, set[str]]:
    """Distribution -> where on the page it is needed."""
    sources: list[tuple[str, str]] = []
    local: set[str] = set()  # what the page's own files provide (``app``, ``shop``)
    for block in blocks(page):
        if block.kind in ("file", "pytest", "serve"):
            sources += block.files()
            local |= {Path(path).parts[0].removesuffix(".py") for path, _ in block.files()}
        elif block.kind == "run":
            sources.append((f"the run block at line {block.line}.py", block.body))
        if block.kind in _RUNS_ON:
            sources.append((f"the {block.kind} block at line {block.line}.py",
                            _RUNS_ON[block.kind]))
    return doc_installs.needed(sources, local)


@pytest.mark.parametrize("page", pages_with_examples(),
                         ids=lambda page: str(page.relative_to(ROOT)))
def test_a_page_names_what_its_examples_need(page: Path) -> None:
    installed = doc_installs.named(page.read_text("utf-8"))
    missing = {name: sorted(where) for name, where in _needs(page).items()
               if name not in installed.names()}
    assert not missing, (
        f"{page.relative_to(ROOT)} installs {installed.describe()!r}, and its examples "
        f"need more ({{distribution: [files]}}): {missing}; name each in a `pip install` "
        "line near the page's top")


# -- the runnable ones run --------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = ServerProcess().start()
    try:
        yield process
    finally:
        process.cleanup()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return doc_installs.build_wheel(tmp_path_factory.mktemp("wheel"))


def _environment(folder: Path, server: ServerProcess, python: Path) -> dict[str, str]:
    # Nothing of this venv or of the tree: the page's folder and its venv only.
    env = {**os.environ, "COGWORKER_REDIS_URL": server.url, "PYTHONPATH": str(folder),
           "COGWORKER_DATA_DIR": str(folder / ".cogworker"),
           "PATH": os.pathsep.join([str(python.parent), os.environ.get("PATH", "")])}
    for name in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(name, None)
    return env


def _run(block: Block, command: list[str], folder: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    assert done.returncode == 0, (
        f"{block.where}: {' '.join(command)} exited {done.returncode}\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout + done.stderr


def _save(block: Block, folder: Path) -> list[Path]:
    saved = []
    for name, text in block.files():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        saved.append(path)
    for directory in {p.parent for p in saved}:  # ``app/jobs.py`` makes ``app`` a package
        while directory != folder:
            (directory / "__init__.py").touch(exist_ok=True)
            directory = directory.parent
    return saved


def _serve(block: Block, python: Path, folder: Path, env: dict[str, str]) -> None:
    target, method, path = block.args[0], *block.args[1:3]
    port = free_port()
    server = subprocess.Popen(
        [str(python), "-m", "uvicorn", target, "--port", str(port), "--log-level",
         "warning"], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                answer = httpx.request(method, f"http://127.0.0.1:{port}{path}", timeout=10)
                break
            except httpx.TransportError:
                if server.poll() is not None:  # say why: a missing module, a bad app
                    raise AssertionError(f"{block.where}: uvicorn {target} exited "
                                         f"{server.returncode}\n{server.stdout.read()}"
                                         ) from None
                if time.monotonic() > deadline:
                    raise AssertionError(f"{block.where}: uvicorn {target} did not serve"
                                         ) from None
                time.sleep(0.05)  # polling for the port to open, bounded by the deadline
        assert answer.is_success, (
            f"{block.where}: {method} {path} -> {answer.status_code} {answer.text}")
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=TIMEOUT)
    # uvicorn re-raises the SIGTERM it shut down on (exit -15) since 0.29; 0 before.
    assert server.returncode in (0, -signal.SIGTERM), (
        f"{block.where}: uvicorn {target} exited {server.returncode}\n{out}")
    assert "Traceback" not in out, f"{block.where}: {out}"
    assert "ERROR" not in out, f"{block.where}: {out}"


# A page's bound: its venv built (the first time; INSTALL_TIMEOUT each pip run), and its
# blocks run (TIMEOUT each: a page of a few blocks takes seconds).
@pytest.mark.timeout(2 * doc_installs.INSTALL_TIMEOUT + 2 * TIMEOUT)
@pytest.mark.parametrize("page", pages_with_examples(),
                         ids=lambda page: str(page.relative_to(ROOT)))
def test_the_examples_of_a_page_run(page: Path, server: ServerProcess, wheel: Path,
                                    tmp_path: Path) -> None:
    with redis.Redis(port=server.port) as r:
        r.flushall()
    python = doc_installs.venv_python(doc_installs.named(page.read_text("utf-8")), wheel)
    env = _environment(tmp_path, server, python)
    for block in blocks(page):
        if block.kind in ("file", "pytest", "serve"):
            saved = _save(block, tmp_path)
            if block.kind == "pytest":
                tests = [str(p.relative_to(tmp_path)) for p in saved
                         if p.name.startswith("test_")]
                out = _run(block, [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   *tests], tmp_path, env)
                # A reader who copies the page sees what pytest prints: no warning in it
                # (a plugin's, as pytest-asyncio's on a setting left unset, is on stderr).
                assert not re.search(r"Warning\b|\d+ warnings?\b", out), f"{block.where}: {out}"
            elif block.kind == "serve":
                _serve(block, python, tmp_path, env)
        elif block.kind == "run":
            script = tmp_path / f"_example_{block.line}.py"
            script.write_text(block.body)
            _run(block, [str(python), "-c", RUNNER, str(script)], tmp_path, env)
