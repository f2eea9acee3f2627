"""The scale instances end to end: ``teccl compile`` of each, timed as a user runs it.

For every instance (AllGather, ReduceScatter and AllReduce of 1 GiB on the 8×8 to 32×32
meshes and tori and the 8×8×8 torus, AlltoAll on rail8x8) this runs ``teccl compile
TOPOLOGY -c KIND -s 1GiB -o FILE --json`` in its own process: solve, check, lower, verify,
write and replay the written MSCCL XML, all of it. Columns: GPUs, chunks per rank,
transfers, the compile's wall seconds (``compile_s``) and CPU seconds of all its
processes (``cpu_s``: what it costs on idle cores), when its first file was ready
(``first_file_s``, from its ``--json``: an anytime compile lowers and verifies several
files, so its progress lines' stages tell no single one's timing), the peak
memory of the compile's processes together (``peak_mb``: the sum of their proportional
set sizes, sampled in a second run of the same compile, so pages a fork shares count
once and the timed run is not slowed by the sampling), the file's size (``xml_mb``),
the replay of the written file over the collective's lower bound (``xml_ratio``, with
``measured_by``), the commit compiled (``commit``, ``+`` when the package had uncommitted
changes), the 1-minute load average at the timed compile's start and end (``load``: on
a shared machine the wall time says more about the others than about the compile; the
CPU seconds do not) and the instance's goal. A saved run is ``{"header": …, "rows": […]}``,
the header holding the machine's cores and the rows' commits::

    python -m devtools.scale_xml [--only NAME …] [--json] [--keep DIR]
    python -m devtools.scale_xml --only NAME … --update bench/scale_xml.json  # rerun rows
    python -m devtools.scale_xml --list
    python -m devtools.scale_xml --table bench/scale_xml.json   # markdown of a saved run

NAME is ``topology`` (every collective on it) or ``topology:kind``. Goals: the XML's
replay within 1.01× the bound at 256 GPUs and 1.02× at 512 and 1024, and at 1024 GPUs
the whole compile within 60 s and 8 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devtools import provenance

TOPOLOGIES = ("mesh8x8", "torus8x8", "mesh16x16", "torus16x16", "torus8x8x8", "mesh32x32",
              "torus32x32")
INSTANCES = [f"{t}:{k}" for k in ("allgather", "reducescatter", "allreduce")
             for t in TOPOLOGIES] + ["rail8x8:alltoall"]
SAMPLE_S = 0.5
GOAL_RATIO = {256: 1.01, 512: 1.02, 1024: 1.02}
GOAL_S, GOAL_MB = 60.0, 8192.0  # the whole compile at 1024 GPUs


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def _tree_pss_mb(pid: int) -> float:
    """Proportional set size of ``pid`` and its descendants together (MB)."""
    kids, todo, total = _children(), [pid], 0
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
    return total / 1024


def run(name: str, workdir: Path, time_limit: float) -> dict:
    """``teccl compile`` one instance in its own process; its numbers as a dict. It runs
    twice: timed as a user runs it, then again with its memory sampled, since reading
    every process's proportional set size slows the compile (5–8 s at 1024 GPUs)."""
    commit, before, load = provenance.commit(), _cpu_s(), provenance.load()
    row = _compile(name, workdir, time_limit, sample=False)
    row["cpu_s"] = round(_cpu_s() - before, 1)
    row["load"] = [load, provenance.load()]
    row["commit"] = commit
    if "error" not in row:
        row["peak_mb"] = _compile(name, workdir, time_limit, sample=True)["peak_mb"]
    return row


def _compile(name: str, workdir: Path, time_limit: float, sample: bool) -> dict:
    """One ``teccl compile`` of the instance: its numbers, with the peak memory if
    ``sample``."""
    topology, kind = name.split(":")
    xml = workdir / f"{topology}_{kind}.xml"
    err = workdir / f"{topology}_{kind}.log"
    cmd = [sys.executable, "-m", "te_ccl", "compile", topology, "-c", kind, "-s", "1GiB",
           "-o", str(xml), "--json", "--time-limit", str(time_limit)]
    start, peak = time.monotonic(), 0.0
    with open(err, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
        if sample:
            while proc.poll() is None:
                peak = max(peak, _tree_pss_mb(proc.pid))
                time.sleep(SAMPLE_S)
        out = proc.stdout.read()
        proc.wait()
    wall = time.monotonic() - start
    row = {"instance": name, "compile_s": round(wall, 1), "peak_mb": round(peak)}
    if proc.returncode != 0:
        lines = [x for x in err.read_text().splitlines() if not x.startswith("teccl: [")]
        row["error"] = (lines or [f"exit {proc.returncode}"])[-1]
        return row
    summary = json.loads(out)
    row.update(gpus=summary["ngpus"], chunks_per_rank=summary["chunks_per_rank"],
               transfers=summary["transfers"], xml_mb=round(xml.stat().st_size / 1e6, 1),
               xml_ratio=round(summary["bound_ratio"], 4), measured_by=summary["measured_by"],
               first_file_s=summary["first_file_s"])
    return row


def _saved_run(header: dict, rows: list[dict], merged: bool = False) -> dict:
    """A run as saved: the header (:mod:`devtools.provenance`, with the rows' commits) and
    the rows. Rows ``merged`` from several runs (an ``--update`` keeps earlier ones) each
    carry their own commit and load, so their header names no single commit, load or
    command: the table's first line would credit them all to the last run."""
    commits = sorted({row["commit"] for row in rows if row.get("commit")})
    header = provenance.finish(header) | {"commits": commits}
    if merged:
        header = {key: header[key] for key in ("cpus", "commits")}
    return {"header": header, "rows": rows}


def _cpu_s() -> float:
    """CPU seconds of the processes this one has reaped (a compile and its forks)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def goal(row: dict) -> str:
    """The instance's goal and whether it is met ('' where it has none)."""
    gpus = row.get("gpus")
    if "error" in row:
        return "failed"
    if gpus not in GOAL_RATIO:
        return ""
    parts = [row["measured_by"] == "xml replay" and row["xml_ratio"] <= GOAL_RATIO[gpus]]
    want = f"xml ≤ {GOAL_RATIO[gpus]}"
    if gpus == 1024:
        parts += [row["compile_s"] <= GOAL_S, row["peak_mb"] <= GOAL_MB]
        want += f", ≤ {GOAL_S:g} s, ≤ {GOAL_MB / 1024:g} GB"
    return f"{want}: {'met' if all(parts) else 'short'}"


COLUMNS = ("instance", "gpus", "chunks_per_rank", "transfers", "compile_s", "cpu_s",
           "first_file_s", "peak_mb", "xml_mb", "xml_ratio", "measured_by", "commit",
           "load", "goal")


def _header() -> str:
    return "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)


def _line(row: dict) -> str:
    cells = [str(row.get(c, "")) for c in COLUMNS]
    if row.get("load"):
        cells[COLUMNS.index("load")] = "–".join(map(str, row["load"]))
    cells[-1] = goal(row) + (f" ({row['error']})" if row.get("error") else "")
    return "| " + " | ".join(cells) + " |"


def _saved(ap: argparse.ArgumentParser, path: str, flag: str) -> tuple[dict | None, list[dict]]:
    """The header and rows of a saved ``--json`` run; a missing or unreadable file ends the
    script with one line (exit 2)."""
    try:
        saved = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        ap.error(f"{flag} {path}: expected a saved --json run ({e})")
    rows = saved.get("rows") if isinstance(saved, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "instance" in r
                                             for r in rows):
        ap.error(f"{flag} {path}: expected a JSON object whose 'rows' are a list of rows "
                 "with an 'instance' key")
    return saved.get("header"), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", metavar="NAME", help="topology or topology:kind")
    ap.add_argument("--list", action="store_true", help="print the instance names and exit")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    ap.add_argument("--keep", metavar="DIR", help="write the XML files here and keep them")
    ap.add_argument("--time-limit", type=float, default=1800.0,
                    help="the compile's --time-limit (s); the goal is judged on its wall time")
    ap.add_argument("--table", metavar="FILE", help="print a saved --json run as markdown")
    ap.add_argument("--update", metavar="FILE",
                    help="replace the rows of the instances run in a saved --json run")
    args = ap.parse_args()
    if args.table:
        saved_header, rows = _saved(ap, args.table, "--table")
        print(provenance.line(saved_header) + "\n")
        print(_header())
        print("\n".join(_line(row) for row in rows))
        return
    # read before the runs, so a bad file is said at once, not after an hour of compiles
    saved = {row["instance"]: row for row in _saved(ap, args.update, "--update")[1]} \
        if args.update else {}
    names = [n for n in INSTANCES
             if not args.only or n in args.only or n.split(":")[0] in args.only]
    if args.list:
        print("\n".join(names))
        return
    header = provenance.start()
    with tempfile.TemporaryDirectory(prefix="scale_xml_") as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if not args.json:
            print(_header(), flush=True)
        rows = []
        for name in names:
            row = run(name, workdir, args.time_limit)
            rows.append(row)
            if not args.json:
                print(_line(row), flush=True)
    if args.update:
        saved |= {row["instance"]: row for row in rows}
        merged = [saved[n] for n in INSTANCES if n in saved]
        earlier = len(merged) > len(rows)  # rows of earlier runs kept
        Path(args.update).write_text(json.dumps(_saved_run(header, merged, earlier), indent=1)
                                     + "\n")
    if args.json:
        print(json.dumps(_saved_run(header, rows), indent=1))


if __name__ == "__main__":
    main()
