"""Pieces shared by several subcommands: consoles, progress, JSON output, collective options.

Consoles render at the terminal's width on a terminal and at full width otherwise (a
table piped to a file or ``less`` keeps every cell whole; ``COLUMNS`` still rules).
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
from rich.console import Console

__all__ = ["err_console", "out_console", "emit_json", "collective_options", "collective_flags",
           "progress_status", "plain_progress", "set_quiet", "is_quiet", "PLAIN_EVERY_S"]

FULL_WIDTH = 1000
"""Columns of a console that is not a terminal: wide enough for any table teccl prints
(tables take their natural width, never more)."""
PLAIN_EVERY_S = 5.0
"""Seconds between plain progress lines when stderr is not a terminal."""


def _console(stderr: bool) -> Console:
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = FULL_WIDTH
    return console


err_console = _console(stderr=True)
out_console = _console(stderr=False)
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


def collective_flags(kw: dict[str, Any]) -> dict[str, Any]:
    """The collective flags the user gave, as ``load_collective`` overrides (pops them from kw)."""
    names = ("collective", "size", "chunks", "ranks", "root", "inplace", "proto")
    return {k: v for k in names if (v := kw.pop(k, None)) is not None}
