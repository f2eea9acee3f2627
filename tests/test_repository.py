"""Repository-wide rules on the tracked text: the product speaks of itself only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TRACKER_REFERENCE = re.compile(r"issue [0-9]", re.IGNORECASE)


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / name for name in out.stdout.decode().split("\0") if name]


def test_no_tracked_file_refers_to_a_tracker_issue():
    hits = []
    for path in tracked_files():
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            if TRACKER_REFERENCE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def test_the_package_never_imports_devtools():
    """devtools/ is not installed: te_ccl importing it would break every installed copy."""
    import ast

    hits = []
    for path in sorted((REPO / "te_ccl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            hits += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names
                     if n.split(".")[0] == "devtools"]
    assert not hits, hits
