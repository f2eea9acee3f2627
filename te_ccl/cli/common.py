"""Pieces shared by several subcommands: consoles, progress, JSON output, collective options.

Streams: results (tables, reports, JSON) go to stdout through :data:`out_console` or
:func:`emit_json`; progress, warnings, notes about what was written and errors go to
stderr through :data:`err_console`. When a command writes its output file to stdout
(``-o -``), its table goes to stderr instead (:func:`table_console`).

Tables on a terminal take the terminal's width. Printed anywhere else with ``COLUMNS``
unset (a pipe, a file), they come out plain: ``# title``, then the header and each row
on a line of their own with the cells separated by tabs, then ``# caption`` — no box
characters, nothing cut or wrapped, for ``grep``, ``awk`` and ``cut``. With ``COLUMNS``
set they are drawn at that width. Other output off a terminal is never wrapped.

Progress is a rich status line on a terminal, plain timestamped lines on stderr
elsewhere (every :data:`PLAIN_EVERY_S` seconds, so CI logs show a long solve is alive),
and nothing under ``teccl --quiet``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

__all__ = ["CliConsole", "err_console", "out_console", "table_console", "plain_table", "emit_json",
           "collective_options", "collective_flags", "progress_status", "plain_progress",
           "set_quiet", "is_quiet", "PLAIN_EVERY_S"]

FULL_WIDTH = 1000
"""Columns of a console that is not a terminal: no line teccl prints there wraps."""
PLAIN_EVERY_S = 5.0
"""Seconds between plain progress lines when stderr is not a terminal."""


def _cell(value: Any) -> str:
    """A cell's text on one line (markup strings as they read, not as written)."""
    text = (value.plain if isinstance(value, Text) else Text.from_markup(value).plain
            if isinstance(value, str) else str(value))
    return " ".join(text.split())


def plain_table(table: Table) -> str:
    """``table`` as plain lines: ``# title``, the header, one tab-separated row a line,
    ``# caption``.

    >>> t = Table("GPU", "done at", title="per-GPU completion")
    >>> t.add_row("g0", "[bold]1.5us[/]")
    >>> plain_table(t).splitlines()
    ['# per-GPU completion', 'GPU\\tdone at', 'g0\\t1.5us']
    """
    lines = [f"# {_cell(table.title)}"] if table.title else []
    if table.show_header:
        lines.append("\t".join(_cell(c.header) for c in table.columns))
    columns = [list(c.cells) for c in table.columns]
    lines += ["\t".join(_cell(cells[i]) for cells in columns) for i in range(table.row_count)]
    if table.caption:
        lines.append(f"# {_cell(table.caption)}")
    return "".join(line + "\n" for line in lines)


class CliConsole(Console):
    """A console that prints tables plain where a program reads them (the module doc)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.is_terminal or "COLUMNS" in os.environ:
            super().print(*objects, **kwargs)
            return
        for o in objects:
            if isinstance(o, Table):
                self.file.write(plain_table(o))
            else:
                super().print(o, **kwargs)

    @property
    def size(self) -> ConsoleDimensions:
        """Off a terminal with ``COLUMNS`` unset, wide enough that no line wraps: decided at
        each print, not once when the module was imported."""
        size = Console.size.fget(self)
        if not self.is_terminal and "COLUMNS" not in os.environ:
            return ConsoleDimensions(FULL_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)

    def on_broken_pipe(self) -> None:
        """Leave a closed stdout to the command line's entry point (rich would exit 1, the
        code of a failed check)."""
        raise BrokenPipeError


err_console = CliConsole(stderr=True)
out_console = CliConsole(stderr=False)
_quiet = threading.Event()


def set_quiet(quiet: bool) -> None:
    """``teccl --quiet``: no progress output at all (results and errors still print)."""
    if quiet:
        _quiet.set()
    else:
        _quiet.clear()


def is_quiet() -> bool:
    return _quiet.is_set()


def plain_progress() -> bool:
    """Progress goes out as plain lines (stderr is not a terminal, and not --quiet)."""
    return not is_quiet() and not err_console.is_terminal


@contextmanager
def progress_status(first: str) -> Iterator[Callable[[str], None]]:
    """A ``progress(message)`` callback for one long operation (see the module doc)."""
    if is_quiet():
        yield lambda message: None
        return
    if err_console.is_terminal:
        with err_console.status(first) as status:
            yield status.update
        return
    latest = [first]
    stop = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not stop.wait(PLAIN_EVERY_S):
            sys.stderr.write(f"teccl: [{time.monotonic() - start:.0f}s] {latest[0]}\n")
            sys.stderr.flush()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield lambda message: latest.__setitem__(0, message)
    finally:
        stop.set()
        thread.join()


def table_console(output: str | None) -> Console:
    """Where a command's tables go: stdout, unless its written file goes there (``-o -``)."""
    return err_console if output == "-" else out_console


def emit_json(obj: Any) -> None:
    """One JSON object on stdout, for pipelines."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def collective_options(f: Callable) -> Callable:
    """The options that describe a collective (flags override the SPEC file)."""
    opts = [
        click.option("--collective", "-c", "collective", metavar="KIND",
                     help="allgather, alltoall, reducescatter, allreduce, broadcast, reduce, "
                          "gather, scatter or custom."),
        click.option("--size", "-s", metavar="SIZE", help="Buffer size with units: 1KB, 64MiB, 1GB."),
        click.option("--chunks", metavar="N|auto", help="Chunks per rank (default 1); auto "
                     "tries 1, 2, 4, 8 and a chunking whose link arithmetic is exact, and "
                     "keeps the schedule (or ring/tree/direct template) whose simulated "
                     "finish is earliest."),
        click.option("--ranks", metavar="LIST", help="Ranks taking part: all, 0-7, 0,2,4,6."),
        click.option("--root", metavar="R", help="Root rank of broadcast, reduce, gather, "
                     "scatter (default: the first rank, 0 unless --ranks says otherwise)."),
        click.option("--inplace/--outofplace", default=None, help="Buffer mode (default out-of-place)."),
        click.option("--proto", metavar="P", help="MSCCL protocol: Simple, LL or LL128."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def collective_flags(kw: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The collective flags the user gave, as ``load_collective`` overrides (pops them from
    kw), and whether ``--chunks auto`` was given: its candidates start from one chunk per
    rank, so the overrides say 1."""
    names = ("collective", "size", "chunks", "ranks", "root", "inplace", "proto")
    flags = {k: v for k in names if (v := kw.pop(k, None)) is not None}
    chunks = flags.get("chunks")
    if chunks == "auto":
        flags["chunks"] = 1
        return flags, True
    if chunks is not None:
        try:
            flags["chunks"] = int(chunks)
        except ValueError:
            from te_ccl.errors import SpecError

            raise SpecError(f"expected a positive integer or auto, got {chunks!r}",
                            key="--chunks") from None
    return flags, False
