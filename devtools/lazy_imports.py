"""Count te_ccl's cross-package imports, and those inside functions (lazy ones).

An import statement of ``te_ccl.X...`` in a module of another package (the name after
``te_ccl.``, as :func:`devtools.layers.layer` reads it) counts once; it is lazy when it
sits inside a function. ``python -m devtools.lazy_imports``
prints the two counts, ``--list`` every lazy one as ``path:line module``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cross_package_imports", "main"]

ROOT = Path(__file__).resolve().parent.parent / "te_ccl"


def _package(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return [node.module or ""] if node.level == 0 else []


def cross_package_imports(root: Path = ROOT) -> Iterator[tuple[str, int, str, bool]]:
    """(path, line, module imported, inside a function) of each cross-package import."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        me = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        mine = _package(me)
        tree = ast.parse(path.read_text(), str(path))
        yield from _walk(tree, str(rel.with_suffix(".py")), mine, False)


def _walk(node: ast.AST, path: str, mine: str, lazy: bool
          ) -> Iterator[tuple[str, int, str, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            for module in _imported(child):
                if module.startswith("te_ccl.") and _package(module) != mine:
                    yield path, child.lineno, module, lazy
        inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _walk(child, path, mine, inner)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    found = list(cross_package_imports())
    lazy = [f for f in found if f[3]]
    if "--list" in argv:
        for path, line, module, _ in lazy:
            print(f"{path}:{line} {module}")
    print(f"{len(lazy)} of {len(found)} cross-package imports sit inside functions")


if __name__ == "__main__":
    main()
