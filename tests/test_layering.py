"""The package's shape, as rules a change cannot quietly break.

Read from the source with an AST walk (nothing is imported): every import counts, at
module level, inside a function (a lazy import) or under ``TYPE_CHECKING`` alike, since a
cycle hidden in any of them still ties the modules' changes together.

- no import cycle between the package's modules;
- no module over ``MAX_LINES`` lines;
- only ``redis/`` imports redis-py: the rest names Redis's failures through
  ``redis/errors.py``;
- only ``cli/`` imports typer and rich, and only ``cli/`` and ``web/`` starlette and
  jinja2: the library and its admin model load no terminal or web framework;
- the core (``worker/``, ``client.py``, ``redis/``) never imports the tools built on it
  (``web/``, ``cli/``, ``admin/``).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Final

PACKAGE: Final = Path(__file__).resolve().parent.parent / "cogworker_async"
MAX_LINES: Final = 500

# Third-party top-level names and the packages (prefixes of module names) allowed them.
OWNERS: Final[dict[str, tuple[str, ...]]] = {
    "redis": ("cogworker_async.redis",),
    "typer": ("cogworker_async.cli",),
    "rich": ("cogworker_async.cli",),
    "starlette": ("cogworker_async.cli", "cogworker_async.web"),
    "jinja2": ("cogworker_async.cli", "cogworker_async.web"),
}
CORE: Final = ("cogworker_async.worker", "cogworker_async.enqueue.client", "cogworker_async.redis")
TOOLS: Final = ("cogworker_async.web", "cogworker_async.cli", "cogworker_async.admin")


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {_name(path): path for path in PACKAGE.rglob("*.py")}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def _imported(module: str, path: Path) -> set[str]:
    """Every module name ``module`` imports (ours as module names, others as given)."""
    known = modules()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if path.name != "__init__.py":
                    base.pop()
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join([*base, *([node.module] if node.module else [])])
            else:
                prefix = node.module or ""
            submodules = {f"{prefix}.{alias.name}" for alias in node.names} & known.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(prefix)
    found.discard(module)
    return found


@cache
def graph() -> dict[str, set[str]]:
    return {name: _imported(name, path) for name, path in modules().items()}


def cycles() -> list[list[str]]:  # noqa: C901  (Tarjan's, kept in one piece)
    """The strongly connected components of more than one module (Tarjan's)."""
    edges = {name: targets & modules().keys() for name, targets in graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_walk_sees_the_package() -> None:
    """The rules below hold vacuously if the walk finds nothing: it finds the core."""
    assert "cogworker_async.worker.processor" in modules()
    assert "cogworker_async.worker.ledger" in graph()["cogworker_async.worker.processor"]
    assert "redis.asyncio" in graph()["cogworker_async.redis.store"]


def test_no_import_cycles() -> None:
    found = cycles()
    described = ["\n".join(f"  {a} -> {b}" for a in component
                           for b in sorted(graph()[a] & set(component)))
                 for component in found]
    assert not found, "import cycles:\n" + "\n\n".join(described)


def test_no_module_over_the_limit() -> None:
    long = {name: lines for name, path in modules().items()
            if (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_third_party_libraries_stay_in_their_packages() -> None:
    strays = sorted(
        (name, target) for name, targets in graph().items() for target in targets
        if (library := target.split(".")[0]) in OWNERS and not _within(name, OWNERS[library]))
    assert not strays, f"imported outside their packages: {strays}"


def test_the_core_never_imports_the_tools() -> None:
    upward = sorted((name, target) for name, targets in graph().items()
                    if _within(name, CORE)
                    for target in targets if _within(target, TOOLS))
    assert not upward, f"the core imports the tools built on it: {upward}"
