"""Pieces shared by several subcommands: consoles, JSON output, collective options."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console

__all__ = ["err_console", "out_console", "emit_json", "collective_options", "collective_flags"]

err_console = Console(stderr=True)
out_console = Console()


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
        click.option("--root", metavar="R", help="Root rank of broadcast, reduce, gather, scatter."),
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
