"""Put bench/results.md into README.md between ``<!-- bench:start -->`` and ``<!-- bench:end -->``.

Run ``python -m devtools.readme [README.md] [bench/results.md]`` after ``make bench``;
the section is regenerated, never hand-written. Plot links are rewritten relative to the
README.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from te_ccl.errors import SpecError
from te_ccl.outputs import write_atomic

__all__ = ["START", "END", "fill_readme"]

START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def fill_readme(readme: str | Path, results: str | Path) -> bool:
    """Replace the text between the markers; returns True if the README changed."""
    readme, results = Path(readme), Path(results)
    try:
        text, body = readme.read_text(), results.read_text()
    except OSError as e:
        raise SpecError(f"cannot read ({e.strerror})", file=e.filename) from None
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SpecError(f"expected one {START} before one {END}", file=str(readme))
    rel = os.path.relpath(results.parent, readme.parent)
    body = body.replace("](plots/", f"]({rel}/plots/") if rel != "." else body
    head, rest = text.split(START)
    new = f"{head}{START}\n{body.rstrip()}\n{END}{rest.split(END, 1)[1]}"
    if new != text:
        write_atomic(readme, new)
    return new != text


if __name__ == "__main__":  # pragma: no cover - thin command-line wrapper
    args = sys.argv[1:] + ["README.md", "bench/results.md"][len(sys.argv[1:]):]
    try:
        changed = fill_readme(args[0], args[1])
    except SpecError as e:
        sys.exit(f"teccl: error: {e}")
    print(f"{args[0]}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
