"""The import graph of collc: no cycles, and every import points down the layers of DESIGN.md.

The graph is read from the source with `ast`, nothing is imported.  Every ``import`` statement
inside collc/ counts: at module level, inside functions, and under ``if TYPE_CHECKING:`` (two
modules that name each other's types are still two modules that each need the other).  An
import resolves to the collc module it names: ``import collc.a.b``, ``from collc.a import b``
(the module ``collc.a.b`` when there is one, else the package ``collc.a``, whose names it reads)
and relative imports alike.  Not counted: that importing ``collc.a.b`` runs ``collc/a/__init__.py``
first (Python's doing, not the importer's), and a module naming itself.

DESIGN.md orders the stages: cli → api → verify/elaborate → backends, frontend, simulate → ir,
codecs, topology, diagnostics; nothing below imports what is above it.  `LAYERS` is that order,
made precise for every part of the package; a module may import its own layer and the layers
below.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import collc

PACKAGE = Path(collc.__file__).resolve().parent

Graph = Mapping[str, Mapping[str, int]]
"""module -> {imported module: the line of its first import}."""

FOUNDATIONS = ("diagnostics", "values", "collectives", "codecs", "topology", "topology_groups", "topologies",
               "hierarchy", "resources", "traffic")  # fmt: skip
"""The parts below every pipeline stage."""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the IR", ("ir",)),  # the contract of every stage: imports nothing of ours
    ("foundations", FOUNDATIONS),
    ("stages on the IR", ("frontend", "backends", "simulate", "eventsim", "viz")),
    ("elaboration", ("elaborate",)),
    ("verification", ("verify",)),  # above elaboration: a sweep elaborates the instances it checks
    ("the API", ("api", "")),  # "": collc/__init__.py, which re-exports the API
    ("tools on the API", ("report", "goodput", "testing", "torch", "netemu", "tune")),
    ("the CLI", ("cli",)),
)
"""The layers, lowest first: (name, the parts of collc in it: ``x`` is ``collc.x`` and what lies under it)."""


# --------------------------------------------------------------------------
# The graph
# --------------------------------------------------------------------------


def module_names(root: Path) -> dict[str, Path]:
    """The modules of the package in folder ``root``, by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _known(name: str, modules: Iterable[str]) -> str | None:
    """The longest prefix of dotted ``name`` that is one of ``modules``."""
    known = set(modules)
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> dict[str, int]:
    """The modules of the package that ``module`` (the file at ``path``) imports, with the line of the first."""
    here = module if path.stem == "__init__" else module.rpartition(".")[0]  # what a relative import starts from
    top = module.partition(".")[0]
    out: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target is not None and target != module and target.partition(".")[0] == top:
            out[target] = min(line, out.get(target, line))

    for node in _statements(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_known(alias.name, modules), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                add(full if full in modules else _known(source, modules), node.lineno)
    return out


def _statements(tree: ast.Module) -> Iterable[ast.AST]:
    """Every statement of ``tree``, however deeply nested (in functions, classes, ifs, trys...); an
    import is a statement, and only statements (and the handlers and cases of ``try`` and ``match``)
    hold statements."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(
            child
            for child in ast.iter_child_nodes(node)
            if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case))
        )


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """The import graph of the package in folder ``root``: every module, with the modules it imports."""
    modules = module_names(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: Graph) -> list[list[str]]:
    """One import cycle of every strongly connected part of ``graph`` that has one, as a closed path.

    Tarjan's algorithm (iterative) finds the parts; within a part of several modules, a
    breadth-first search from its first module (by name) back to itself gives a shortest cycle.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        parts.append(sorted(part))
    return [_shortest_cycle(graph, part) for part in sorted(parts)]


def _shortest_cycle(graph: Graph, part: list[str]) -> list[str]:
    members, first = set(part), part[0]
    came_from: dict[str, str] = {}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), first]
                if nxt in members and nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{part} is not strongly connected")


def cycle_text(graph: Graph, cycle: list[str]) -> str:
    """``a (line 3) -> b (line 9) -> a``: the lines are those of the imports."""
    steps = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join([*steps, cycle[-1]])


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The position in ``layers`` of the part of the package that ``module`` belongs to."""
    part = module.split(".")[1] if "." in module else ""
    for k, (_, parts) in enumerate(layers):
        if part in parts:
            return k
    return None


def upward_imports(graph: Graph, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    """Every import of a module of a higher layer, as ``a (layer) imports b (layer) at line n``."""
    out = []
    for module, targets in sorted(graph.items()):
        below = layer_of(module, layers)
        for target, line in sorted(targets.items()):
            above = layer_of(target, layers)
            if below is not None and above is not None and above > below:
                out.append(f"{module} ({layers[below][0]}) imports {target} ({layers[above][0]}) at line {line}")
    return out


# --------------------------------------------------------------------------
# collc
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph(PACKAGE)


def test_the_graph_sees_every_kind_of_import(graph: Graph) -> None:
    assert len(graph) > 50
    assert graph["collc.api"].keys() >= {"collc.verify.check", "collc.backends.local", "collc.elaborate"}
    assert "collc.viz" in graph["collc.cli.pictures"]  # an import inside a function
    assert "collc.codecs" in graph["collc.cli.catalog"]  # `from collc import codecs` inside a function


def test_no_import_cycle(graph: Graph) -> None:
    found = cycles(graph)
    assert not found, "import cycles in collc/:\n" + "\n".join(cycle_text(graph, c) for c in found)


def test_every_module_has_a_layer(graph: Graph) -> None:
    placed = {part for _, parts in LAYERS for part in parts}
    assert [m for m in graph if layer_of(m) is None] == [], f"add them to LAYERS (it has {sorted(placed)})"


def test_imports_point_down_the_layers(graph: Graph) -> None:
    wrong = upward_imports(graph)
    assert not wrong, "imports up the layers of DESIGN.md:\n" + "\n".join(wrong)


# --------------------------------------------------------------------------
# The checks themselves, on graphs and packages with known faults
# --------------------------------------------------------------------------


def test_cycles_on_synthetic_graphs() -> None:
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}, "d": {"a": 1, "c": 1}}) == []
    assert cycles({"a": {"a": 1}}) == []  # a module naming itself is no cycle between modules
    ring = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert cycles(ring) == [["a", "b", "c", "a"]]
    assert cycle_text(ring, ["a", "b", "c", "a"]) == "a (line 1) -> b (line 2) -> c (line 3) -> a"
    # two separate cycles, and a shortest path within a larger part: a -> e -> a beats a -> b -> c -> a
    two = {"a": {"b": 1, "e": 1}, "b": {"c": 1}, "c": {"a": 1}, "e": {"a": 1}, "x": {"y": 1}, "y": {"x": 1}}
    assert cycles(two) == [["a", "e", "a"], ["x", "y", "x"]]
    # a long chain closing on itself (deeper than Python's recursion limit would allow recursively)
    chain = {f"m{i:05}": {f"m{i + 1:05}": 1} for i in range(5000)}
    assert cycles(chain) == []
    chain["m05000"] = {"m00000": 1}
    (found,) = cycles(chain)
    assert len(found) == 5002 and found[0] == found[-1] == "m00000"


def _write(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_package_with_cycles_of_every_kind_of_import(tmp_path: Path) -> None:
    pkg = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.api import run\n",
            "pkg/api.py": "import os\nimport pkg.low.base as base\nfrom pkg import low\n",
            "pkg/low/__init__.py": "",
            "pkg/low/base.py": "def f():\n    from ..api import run\n",  # relative, inside a function
            "pkg/low/types.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import base\nfrom .base import f\n"
            ),
            "pkg/low/leaf.py": "from pkg.low import types, missing\nimport pkg\n",
        },
    )
    graph = import_graph(pkg)
    assert graph == {
        "pkg": {"pkg.api": 1},
        "pkg.api": {"pkg.low.base": 2, "pkg.low": 3},
        "pkg.low": {},
        "pkg.low.base": {"pkg.api": 2},
        "pkg.low.types": {"pkg.low.base": 3},
        "pkg.low.leaf": {"pkg.low.types": 1, "pkg.low": 1, "pkg": 2},
    }
    found = cycles(graph)
    assert found == [["pkg.api", "pkg.low.base", "pkg.api"]]
    assert cycle_text(graph, found[0]) == "pkg.api (line 2) -> pkg.low.base (line 2) -> pkg.api"
    layers = (("low", ("low",)), ("api", ("api", "")))
    assert upward_imports(graph, layers) == [
        "pkg.low.base (low) imports pkg.api (api) at line 2",
        "pkg.low.leaf (low) imports pkg (api) at line 2",
    ]
    # the cycle broken the way collc breaks its own: the shared part moves down
    (pkg / "low" / "base.py").write_text("def f():\n    from . import types\n")
    assert cycles(import_graph(pkg)) == [["pkg.low.base", "pkg.low.types", "pkg.low.base"]]
    (pkg / "low" / "types.py").write_text("from typing import Protocol\n")
    assert cycles(import_graph(pkg)) == []
