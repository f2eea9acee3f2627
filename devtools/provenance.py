"""Where a saved bench run came from: the commit, the machine's load and the command.

A bench's numbers are ratios measured in one run on a shared machine; a saved run says
which code made them (``commit``, ``+`` when te_ccl/ had uncommitted changes), how busy
the machine was (the 1-minute load average at the run's start and end, beside ``cpus``)
and the command that made it, so a reader can rerun it or discount it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The short commit of the package, ``+`` if te_ccl/ has uncommitted changes ("" outside
    a git checkout)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "te_ccl"], cwd=ROOT,
                               text=True, capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+" if dirty else "")


def load() -> float:
    """The 1-minute load average, rounded as the benches print it."""
    return round(os.getloadavg()[0], 1)


def start(argv: list[str] | None = None) -> dict:
    """A run's header as it starts: commit, load at start, command, cores. ``argv`` defaults
    to this process's (as ``python -m module args``)."""
    if argv is None:
        argv = ["python", "-m", _module(), *sys.argv[1:]]
    return {"commit": commit(), "load": [load()], "command": shlex.join(argv),
            "cpus": os.cpu_count()}


def finish(header: dict) -> dict:
    """The header with the load at the run's end added."""
    return header | {"load": [header["load"][0], load()]}


def line(header: dict | None) -> str:
    """The header as one markdown line (a saved table's first line)."""
    if not header:
        return "Run: header not recorded."
    made = header.get("commit") or ", ".join(header.get("commits", [])) or "not recorded"
    loads = "–".join(map(str, header.get("load", []))) or "not recorded"
    command = f"`{header['command']}`" if header.get("command") else "command not recorded"
    return f"Run: commit {made}, load {loads} on {header.get('cpus', '?')} cores, {command}."


def _module() -> str:
    """The running module's dotted name (``devtools.x``), or the script's path."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec and spec.name else sys.argv[0]
