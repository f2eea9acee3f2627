"""No import cycle inside the package, counting imports made inside functions.

An in-function import hides a cycle from Python's loader but not from a reader: the two
modules still cannot be understood, tested or moved apart. ``TYPE_CHECKING`` imports are
annotations only and do not count; ``te_ccl.cli`` (thin command modules loaded lazily) is
left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import te_ccl
from devtools.layers import layer

PACKAGE = Path(te_ccl.__file__).parent


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("te_ccl",) + path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _owner(name: str, mods: dict[str, Path]) -> str:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name


def _annotation_only(tree: ast.AST) -> set[int]:
    return {id(n) for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _annotation_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(_owner(a.name, mods) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level
                                      + (path.name == "__init__.py")]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                found.add(sub if sub in mods else _owner(mod, mods))
    return {m for m in found if m.startswith("te_ccl") and m != name}


def import_graph() -> nx.DiGraph:
    mods = _modules()
    graph = nx.DiGraph()
    for name, path in mods.items():
        if name.startswith("te_ccl.cli"):
            continue
        graph.add_node(name)
        graph.add_edges_from((name, m) for m in _imports(name, path, mods)
                             if not m.startswith("te_ccl.cli"))
    return graph


def test_no_import_cycle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph())
              if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_the_graph_sees_in_function_imports():
    graph = import_graph()
    assert graph.has_edge("te_ccl.compiler.warm", "te_ccl.compiler.candidates")
    assert graph.number_of_edges() > graph.number_of_nodes()


def test_fred_never_imports_lower():
    """FRED describes phases; writing them as switch tables is lowering's job."""
    graph = import_graph()
    assert not [(a, b) for a, b in graph.edges
                if a.startswith("te_ccl.fred") and b.startswith("te_ccl.lower")]


def test_the_package_never_imports_devtools():
    """devtools/ is not installed: an import of it would break the installed package."""
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(name, a.name) for a in node.names if a.name.split(".")[0] == "devtools"]
            elif isinstance(node, ast.ImportFrom) and not node.level \
                    and (node.module or "").split(".")[0] == "devtools":
                found.append((name, node.module))
    assert not found


def test_no_module_imports_a_higher_layer():
    upward = sorted(f"{a} -> {b}" for a, b in import_graph().edges() if layer(a) < layer(b))
    assert not upward, "imports that climb the pipeline:\n" + "\n".join(upward)
