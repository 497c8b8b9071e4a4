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


def every_mention() -> list[tuple[str, str]]:
    return sorted((doc.relative_to(ROOT).as_posix(), path)
                  for doc in DOCUMENTS for path in mentioned(doc.read_text("utf-8")))


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
