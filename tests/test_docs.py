"""Every file path the README and the docs name exists in the repository: a reader who
follows a pointer finds what it points at (the repository stands alone)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parent.parent
DOCUMENTS: Final = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                    ROOT / "benchmarks" / "RESULTS.md"]
EXTENSIONS: Final = (".py", ".md", ".lua", ".html", ".css", ".js", ".png", ".toml", ".json")
TOP_LEVEL: Final = ("cogworker_async/", "tests/", "docs/", "benchmarks/", "examples/", ".ci/")
MADE_BY_RUNS: Final = ("screenshots/", "benchmarks/results/", "benchmarks/.venvs/", ".venv/",
                       "./.cogworker/", ".cogworker/")
"""Paths that a run writes (git ignores them): named in the docs, not committed."""

_CANDIDATE: Final = re.compile(r"`([^`\s]+)`|\]\(([^)\s]+)\)")


def mentioned(text: str) -> set[str]:
    """Repository paths named in ``text``: in backticks or as a link target."""
    found = set()
    for match in _CANDIDATE.finditer(text):
        token = (match.group(1) or match.group(2)).split("#")[0].split("::")[0]
        token = token.rstrip(".,:;")
        if "://" in token or any(ch in token for ch in "<>*{}$=|"):
            continue
        if token.startswith(TOP_LEVEL) or (token.endswith(EXTENSIONS) and "/" in token):
            found.add(token)
    return found


FEATURE_MAP: Final = "\n## The feature map\n"
"""The section of docs/development.md whose code paths are under ``cogworker_async/``
(checked by ``test_every_path_the_feature_map_names_exists``, not by the scan)."""


def without_feature_map(text: str) -> str:
    start = text.find(FEATURE_MAP)
    if start < 0:
        return text
    end = text.find("\n## ", start + len(FEATURE_MAP))
    return text[:start] + (text[end:] if end >= 0 else "")


def every_mention() -> list[tuple[str, str]]:
    return sorted((doc.relative_to(ROOT).as_posix(), path) for doc in DOCUMENTS
                  for path in mentioned(without_feature_map(doc.read_text("utf-8"))))


@pytest.mark.parametrize(("document", "path"), every_mention())
def test_a_named_path_exists(document: str, path: str) -> None:
    if path.startswith(MADE_BY_RUNS):
        return
    base = (ROOT / document).parent if path.startswith(("./", "../")) else ROOT
    assert (base / path).exists(), f"{document} names {path}, which is not in the repository"


def test_the_documents_name_paths_at_all() -> None:
    """The scan itself works: the README names the scripts' folder and the design doc."""
    named = {path for _, path in every_mention()}
    assert "docs/design.md" in named
    assert "docs/deployment.md" in named


_TREE_NAME: Final = re.compile(r"[\w.]+/?")
README: Final = ROOT / "README.md"
README_MAX_BYTES: Final = 15_000
"""The README is the project's front page (what it is, the promise, the two commands, an
example, where the manual is), not the manual: the manual is the site built from docs/."""


def module_tree(text: str) -> list[str]:
    """The paths named by the fenced tree that starts with ``cogworker_async/`` (two
    spaces of indentation a level; a line names one or more entries, then says what
    they are)."""
    start = text.index("```\ncogworker_async/\n") + len("```\n")
    parents: list[str] = []
    paths = []
    for line in text[start:text.index("```", start)].splitlines():
        level = (len(line) - len(line.lstrip(" "))) // 2
        del parents[level:]
        for name in re.split(r"\s{2,}", line.strip()):
            if not _TREE_NAME.fullmatch(name):
                break
            paths.append("".join(parents) + name)
            if name.endswith("/"):
                parents.append(name)
    return paths


def _module_map() -> list[str]:
    return module_tree((ROOT / "docs" / "development.md").read_text("utf-8"))


def test_the_module_tree_names_modules_that_exist() -> None:
    """docs/development.md's map of the package names only what is there."""
    paths = _module_map()
    assert "cogworker_async/worker/manager.py" in paths
    assert "cogworker_async/cli/migrate.py" in paths  # four on one line
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert not missing, f"docs/development.md's module tree names what is gone: {missing}"


def test_the_module_tree_names_every_module() -> None:
    """... and everything that is there: a module added without its line in the map
    fails here. A package's ``__init__.py`` is named by its package's line (which says
    what the package is), or by a line of its own."""
    named = set(_module_map())
    package = ROOT / "cogworker_async"
    unnamed = sorted(
        relative for path in package.rglob("*.py")
        if (relative := path.relative_to(ROOT).as_posix()) not in named
        and not (path.name == "__init__.py"
                 and f"{path.parent.relative_to(ROOT).as_posix()}/" in named))
    assert not unnamed, f"docs/development.md's module tree leaves out: {unnamed}"


def feature_map() -> dict[str, list[str]]:
    """docs/development.md's feature map: each feature (a row) and the paths it names
    (in backticks, with a ``/`` or a file's extension; code under ``cogworker_async/``,
    tests and docs from the root; a ``*`` is a glob)."""
    text = (ROOT / "docs" / "development.md").read_text("utf-8")
    start = text.index(FEATURE_MAP)
    end = text.find("\n## ", start + len(FEATURE_MAP))
    rows: dict[str, list[str]] = {}
    for line in text[start:end if end >= 0 else None].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or set(cells[1]) <= {"-"} \
                or cells[0] == "feature":
            continue
        rows[cells[0]] = [token for cell in cells[1:]
                          for token in re.findall(r"`([^`]+)`", cell)
                          if "/" in token or token.endswith(EXTENSIONS)]
    return rows


def _located(path: str) -> list[Path]:
    base = ROOT if path.startswith(("tests/", "docs/")) else ROOT / "cogworker_async"
    if path.endswith(".html") and "/" not in path:  # a template, as its route names it
        return [ROOT / "cogworker_async" / "web" / "templates" / path]
    return sorted(base.glob(path)) if "*" in path else [base / path]


def test_every_path_the_feature_map_names_exists() -> None:
    rows = feature_map()
    assert {"batches", "priorities", "outbox", "records"} <= rows.keys()
    assert "worker/notes_relay.py" in rows["batches"]
    missing = [(feature, path) for feature, paths in rows.items() for path in paths
               if not any(found.exists() for found in _located(path))]
    assert not missing, f"docs/development.md's feature map names what is not there: {missing}"


def test_the_readme_is_a_front_page_not_a_manual() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size:,} bytes, over {README_MAX_BYTES:,}: move the detail into its "
        "page of docs/ and link to it")


README_LEAD_WORDS: Final = 80
"""Words the README may hold before "The two commands": a title and a line saying what it
is (issue 45: a newcomer read 544 words before the first thing to type)."""


def test_the_readme_opens_with_the_two_commands_and_install_with_no_placeholder() -> None:
    text = README.read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## The two commands", "## Install"], headings[:3]
    lead = text[:text.index("## The two commands")]
    assert len(lead.split()) <= README_LEAD_WORDS, lead
    assert not re.search(r"<[^>\n]*URL[^>\n]*>", text), "a placeholder URL in the README"


def test_no_page_gives_a_placeholder_url_to_type() -> None:
    """A real URL or none (issue 45 item 10): a newcomer who copies a line of the docs
    must not paste "<the repository's URL>" into a shell."""
    pages = [README, *sorted((README.parent / "docs").rglob("*.md"))]
    placed = [str(page) for page in pages
              if re.search(r"<[^>\n]*URL[^>\n]*>", page.read_text())]
    assert not placed, placed



_OUR_INSTALL: Final = re.compile(
    r"pip install ['\"]?(?P<target>[^'\"\s`]*cogworker[^'\"\s`]*|\.\[)")


def test_every_install_line_is_typed_in_the_clone_and_the_guides_say_so() -> None:
    """One place to stand (issue 45, the first hour): every install of this package reads
    ``pip install '.[extra]'`` in the clone's folder; ``'./cogworker-async[web]'`` works
    only from the clone's parent, and the README and getting-started ``cd`` into it first."""
    pages = [README, *sorted((README.parent / "docs").rglob("*.md"))]
    elsewhere = [f"{page.relative_to(ROOT)}: {found['target']}" for page in pages
                 for found in _OUR_INSTALL.finditer(page.read_text())
                 if found["target"] != ".["]
    assert not elsewhere, elsewhere
    for page in (README, ROOT / "docs" / "getting-started.md"):
        text = page.read_text()
        first = text.index("pip install '.[")
        assert "cd cogworker-async" in text[:first], f"{page.name}: no cd before its install"


def test_no_message_names_an_install_that_cannot_work() -> None:
    """The package is on no index: a message saying ``pip install 'cogworker-async[web]'``
    sends the reader to a command that fails (issue 45); errors.install_extra says it."""
    sources = sorted((ROOT / "cogworker_async").rglob("*.py"))
    wrong = [f"{path.relative_to(ROOT)}: {found['target']}" for path in sources
             for found in _OUR_INSTALL.finditer(path.read_text())
             if found["target"] != ".["]
    assert not wrong, wrong
