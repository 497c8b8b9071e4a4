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
- only ``outbox/`` imports SQLAlchemy, only ``prometheus/`` prometheus_client, only
  ``observe/tracing.py`` OpenTelemetry: a process without an extra imports nothing of it;
- imports go down ``LAYERS`` (bottom first: errors, environment, version; jobs/;
  settings, middleware, logs; observe/; redis/; limits/; workflows/; enqueue/;
  worker/; outbox/; app, running, ``__init__``, ``__main__``; testing/; admin/,
  prometheus/, web/, cli/), never up, but for the few edges ``UPWARD_ALLOWED`` names
  with their reason;
- no class name is defined in two modules: each name says which one it is.
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
    "sqlalchemy": ("cogworker_async.outbox",),
    "prometheus_client": ("cogworker_async.prometheus",),
    "opentelemetry": ("cogworker_async.observe.tracing",),
}

LAYERS: Final[tuple[tuple[str, ...], ...]] = (
    ("errors", "environment", "version"),
    ("jobs",),
    ("settings", "middleware", "logs"),
    ("observe",),
    ("redis",),
    ("limits",),
    ("workflows",),
    ("enqueue",),
    ("worker",),
    ("outbox", "prometheus.process", "prometheus.server"),
    ("app", "running", "wiring", "", "__main__"),
    ("testing",),
    ("admin", "prometheus", "web", "cli"),
)
"""The package's layers, bottom first (names below ``cogworker_async``; ``""`` is its
``__init__``; the longest name that matches decides). The layer above the worker holds
the extras a worker process runs (the outbox, its own Prometheus metrics: neither
imports the worker), so the App's ``wiring.py`` builds them for the Manager looking
down; the rest of ``prometheus/`` reads through ``admin/``, a tool."""

UPWARD_ALLOWED: Final[dict[tuple[str, str], str]] = {
    ("__main__", "cli"): "the entry point: python -m cogworker_async is the CLI",
    ("", "admin"): "lazy: the Inspector export (cogworker_async.Inspector), loaded when named",
    ("", "testing"): "lazy: the Testing export (App.testing's type), loaded when named",
    ("app", "testing"): "lazy: App.testing hands out the fake, loaded when asked",
    ("app", "admin.periodic"): "lazy: App.periodic_jobs returns the admin model's view",
}
"""Imports that go up a layer, each by name and why (lazy: inside the one function that
needs it, so that importing the lower module loads nothing of the higher)."""


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


def _short(name: str) -> str:
    return name.removeprefix("cogworker_async").removeprefix(".")


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of a module of the package (its longest matching name)."""
    name = _short(module)
    found = [(len(prefix), index) for index, layer in enumerate(LAYERS) for prefix in layer
             if name == prefix or (prefix and name.startswith(prefix + "."))]
    assert found, f"{module} is in no layer of LAYERS: add it"
    return max(found)[1]


def upward_edges() -> list[tuple[str, str]]:
    """Every import of a module of a higher layer, as (importer, imported) short names."""
    return sorted((_short(name), _short(target)) for name, targets in graph().items()
                  for target in targets
                  if target in modules() and layer_of(target) > layer_of(name))


def test_every_module_has_a_layer() -> None:
    assert {layer_of(name) for name in modules()} == set(range(len(LAYERS)))


def test_imports_go_down_the_layers() -> None:
    stray = [edge for edge in upward_edges() if not _allowed(*edge)]
    assert not stray, "imports of a higher layer:\n" + "\n".join(
        f"  {a} -> {b}" for a, b in stray)


def _allowed(importer: str, imported: str) -> bool:
    return any(importer == a and (imported == b or imported.startswith(b + "."))
               for a, b in UPWARD_ALLOWED)


def test_every_allowed_exception_is_still_needed() -> None:
    """An exception whose edge is gone is removed, not left to excuse a new one."""
    edges = upward_edges()
    unused = [pair for pair in UPWARD_ALLOWED
              if not any(_allowed(*edge) and edge[0] == pair[0]
                         and (edge[1] == pair[1] or edge[1].startswith(pair[1] + "."))
                         for edge in edges)]
    assert not unused, f"UPWARD_ALLOWED names edges that are gone: {unused}"


def classes() -> dict[str, list[str]]:
    """Each class name defined at a module's top level, and the modules defining it."""
    found: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(name)
    return found


def test_no_class_name_is_defined_twice() -> None:
    """``Note`` or ``Queues`` in two modules makes a reader (and an import) ask which:
    each class has a name of its own across the package."""
    twice = {name: where for name, where in classes().items() if len(where) > 1}
    assert not twice, f"class names defined in more than one module: {twice}"
