"""The documentation site builds: ``mkdocs build --strict`` (mkdocs.yml at the root) turns
every warning into a failure — a link to a page or an anchor that is not there, a page
left out of the nav, a docstring the API reference cannot render — so a reader never
meets a broken link. Needs the ``docs`` extra; skipped, saying so, without it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from cogworker_async import __version__
from tests.test_docs import MADE_BY_RUNS, mentioned

ROOT: Final = Path(__file__).resolve().parent.parent
DOCS: Final = ROOT / "docs"
BUILD_TIMEOUT: Final = 50.0
"""Seconds the build may take (about 2 s on the development machine), within the
per-test timeout."""
DOCS_PACKAGES: Final = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
"""What the build needs: the ``docs`` extra (MkDocs, the Material theme, mkdocstrings and
its Python handler)."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


missing = [name for name in DOCS_PACKAGES if not installed(name)]
needs_mkdocs = pytest.mark.skipif(
    bool(missing),
    reason=f"the docs extra is not installed ({', '.join(missing)} missing): "
           "pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with --strict into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr}{built.stdout}"
    return out


@needs_mkdocs
def test_every_page_builds_with_no_warning(site: Path) -> None:
    pages = sorted(page.relative_to(DOCS).with_suffix("").as_posix()
                   for page in DOCS.rglob("*.md"))
    for page in pages:
        built = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), f"docs/{page}.md was not built into the site"


@needs_mkdocs
def test_the_api_reference_is_generated_from_the_docstrings(site: Path) -> None:
    """The reference shows the public API with the text of its docstrings."""
    api = (site / "reference" / "api" / "index.html").read_text("utf-8")
    for anchor in ("cogworker_async.App.enqueue", "cogworker_async.Enqueuer.enqueue_sync",
                   "cogworker_async.Settings.shutdown_timeout", "cogworker_async.current_job",
                   "cogworker_async.JobStatus", "cogworker_async.errors.JobTimeout"):
        assert f'id="{anchor}"' in api, f"the API reference has no entry for {anchor}"
    assert "How long running jobs get to finish after SIGTERM" in api
    web = (site / "reference" / "web" / "index.html").read_text("utf-8")
    assert 'id="cogworker_async.web.create_dashboard"' in web
    admin = (site / "reference" / "admin" / "index.html").read_text("utf-8")
    assert 'id="cogworker_async.Inspector"' in admin


@needs_mkdocs
def test_every_page_names_the_packages_version(site: Path) -> None:
    """The footer says which version a reader is reading about: the package's own."""
    index = (site / "index.html").read_text("utf-8")
    assert f"cogworker-async {__version__}" in index


def test_the_sites_pages_name_only_paths_that_exist() -> None:
    """What tests/test_docs.py checks for docs/*.md, for the pages in docs' folders: a
    path in backticks or a link target is in the repository (relative ones from the
    page's own folder)."""
    for page in sorted(DOCS.rglob("*/*.md")):
        for path in mentioned(page.read_text("utf-8")):
            base = page.parent if path.startswith(("./", "../")) else ROOT
            assert path.startswith(MADE_BY_RUNS) or (base / path).exists(), \
                f"{page.relative_to(ROOT)} names {path}, which is not in the repository"
