"""The package's layering, read from the source: arrows point down, nothing cycles.

Every ``import`` statement of every module under ``src/aneforge`` is parsed (module
level and inside functions, relative and absolute). The rules of docs/architecture.md:

1. every package and top-level module sits in exactly one layer of :data:`LAYERS`;
2. a module imports only its own package or the layers below its own;
3. no import of an aneforge module happens inside a function (lazy imports are for
   optional third-party packages only);
4. the modules form no import cycle, inside a package included.

There is no allow-list: a new package must be placed in :data:`LAYERS`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "aneforge"

#: Bottom to top. Units in one layer do not import each other. ``<root>`` is
#: ``aneforge/__init__.py``, the composition root that wires the plug-ins.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "errors _version gcpause tables cachedir",
        "data limits",
        "graph",
        "targets",
        "compression",
        "emulator",
        "devices",
        "compiler",
        "kernel",
        "cost",
        "analysis numerics reference metrics",
        "optimizer",
        "driver",
        "io",
        "models",
        "report plot",
        "cli_models",
        "cli",
        "testing",
        "<root>",
    )
)


def _modules() -> dict[str, Path]:
    """``{dotted name: path}`` of every module of the package."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def unit(module: str) -> str:
    """The layer unit of a module: its top-level package or module under aneforge."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def _targets(module: str, node: ast.AST) -> list[str]:
    """The aneforge modules one import statement loads (a name imported from a package
    counts as its submodule when it is one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "aneforge"]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        is_package = MODULES[module].name == "__init__.py"
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "aneforge":
        return []
    found = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        found.append(sub if sub in MODULES else target)
    return found


def _imports() -> list[tuple[str, str, int, bool]]:
    """``(importer, imported, line, inside a function)`` for every aneforge import."""
    edges = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        stack = [(tree, False)]
        while stack:
            node, local = stack.pop()
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node):
                    if target != module:
                        edges.append((module, target, node.lineno, local))
            inner = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return edges


EDGES = _imports()


def _layer_of() -> dict[str, int]:
    index = {}
    for i, layer in enumerate(LAYERS):
        for name in layer:
            assert name not in index, f"{name} is in two layers"
            index[name] = i
    return index


LAYER_OF = _layer_of()


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(SRC.parent)}:{line}"


def test_the_walk_sees_the_package():
    """The walk is not vacuous: it finds the modules and their known imports."""
    assert len(MODULES) > 100
    pairs = {(a, b) for a, b, _, _ in EDGES}
    assert ("aneforge.driver", "aneforge.optimizer.pipelines") in pairs
    assert ("aneforge.graph.api", "aneforge.graph.tensor") in pairs
    assert ("aneforge", "aneforge.driver") in pairs


def test_every_unit_has_a_layer():
    missing = sorted({unit(m) for m in MODULES} - set(LAYER_OF))
    assert not missing, f"place these in tests/test_layers.py LAYERS: {missing}"
    unused = sorted(set(LAYER_OF) - {unit(m) for m in MODULES} - {"data"})
    assert not unused, f"LAYERS names units that do not exist: {unused}"


def test_imports_point_down():
    upward = sorted(
        {
            f"{_where(a, line)}: {unit(a)} (layer {LAYER_OF[unit(a)]}) imports {b} "
            f"({unit(b)}, layer {LAYER_OF[unit(b)]})"
            for a, b, line, _ in EDGES
            if unit(a) != unit(b) and LAYER_OF[unit(b)] >= LAYER_OF[unit(a)]
        }
    )
    assert not upward, "imports that do not point down:\n" + "\n".join(upward)


def test_no_function_local_imports_of_aneforge_modules():
    local = sorted({f"{_where(a, line)}: imports {b}" for a, b, line, inner in EDGES if inner})
    assert not local, "function-local aneforge imports (hoist them):\n" + "\n".join(local)


def _cycles(edges) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycles():
    cycles = _cycles({(a, b) for a, b, _, _ in EDGES})
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "edges, expected",
    [
        ({("aneforge.graph.tensor", "aneforge.graph.api")}, []),
        (
            {("aneforge.graph.tensor", "aneforge.graph.api"),
             ("aneforge.graph.api", "aneforge.graph.tensor")},
            [["aneforge.graph.api", "aneforge.graph.tensor"]],
        ),
    ],
)  # fmt: skip
def test_the_cycle_finder_finds_cycles(edges, expected):
    assert _cycles(edges) == expected


def test_the_rules_catch_an_upward_import(tmp_path):
    """The checks fail on what they forbid: an upward, function-local import parsed
    from a synthetic module placed in ``graph``."""
    source = "def f():\n    from ..driver import compile\n"
    tree = ast.parse(source)
    node = tree.body[0].body[0]
    MODULES["aneforge.graph.fake"] = tmp_path / "fake.py"
    try:
        (target,) = _targets("aneforge.graph.fake", node)
    finally:
        del MODULES["aneforge.graph.fake"]
    assert target == "aneforge.driver"
    assert LAYER_OF[unit(target)] > LAYER_OF["graph"]
