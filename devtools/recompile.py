"""``python -m devtools.recompile``: compiling again after a failure, from the previous file.

For each case: compile an AllGather on the topology (the previous file), remove one link
or GPU or slow a link (``teccl topo edit``), then compile on the changed topology twice, from
scratch and with ``--from`` the previous file. The targets: the compile from the
previous file takes at most :data:`TIME_GOAL` of the time from scratch, and its file
finishes within :data:`QUALITY_GOAL` of the one from scratch (both by the written XML's
replay, ``finish_time_s`` of ``teccl compile --json``). Each of the two is timed in a
process of its own that imported :mod:`te_ccl.api` before the clock starts, so neither
finds what the other, or the previous file's compile, left behind (imports, the bound,
the topology's routes). Times are wall-clock seconds on whatever else the machine runs,
so they vary from run to run; the processor seconds (the compile's and its workers')
are shown beside them. Three
columns say what a compile from the previous file cannot avoid: when the compile from
scratch had its first file (one file lowered, verified and replayed, as any compile
that writes a new file must), the previous file kept as it is, replayed on the
changed network, over the lower bound, and, last, the previous file read and its own
written file verified and replayed, alone, in processor seconds and as a share of the
compile from scratch (a compile from the previous file that writes that file spends at
least that); before it, what the compile from the previous file notes of it (the
splice's replay where it does not stand). Below the table: what starting Python and
importing :mod:`te_ccl.api` takes, which ``teccl compile`` pays besides, with or
without ``--from``, and neither timed compile counts.

Writes ``OUT/recompile.json`` (``{"header": …, "rows": […]}``, the header saying the run's
commit, load and command, :mod:`devtools.provenance`) and ``OUT/recompile.md`` (that
header its first line; default ``bench/``) and prints
the table on stderr; exits 1 when a target is missed, unless ``--no-fail``.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing.context import BaseContext
from pathlib import Path

import click

from devtools import provenance
from te_ccl import api
from te_ccl.cli.common import err_console
from te_ccl.deadline import cpu_s
from te_ccl.outputs import make_output_dir, write_atomic
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.topology.edit import TopologyEdit, edit_topology
from te_ccl.topology.model import Topology
from te_ccl.units import parse_size
from te_ccl.verify.msccl import read_msccl, verify_msccl

__all__ = ["CASES", "Recompile", "recompile", "main"]

TIME_GOAL = 0.25  # of the compile from scratch
QUALITY_GOAL = 1.02  # finish time over the one from scratch
LIMIT_S = 60.0  # each compile's time limit (teccl compile's default)
SIZE = "1GB"
CASES = (("dgx1", TopologyEdit(without_links=("g0:g1",))),
         ("ndv2x4", TopologyEdit(without_links=("b0.g0:b0.g1",))),
         ("torus16x16", TopologyEdit(without_links=("g0:g1",))),
         ("ndv2x4", TopologyEdit(without_gpus=("b0.g1",))),
         ("ndv2x4", TopologyEdit(scale_links=(("b1.g0:sw", 0.5),))))
HEADER = (f"Written by `python -m devtools.recompile` (`make bench`): per case, a {SIZE} AllGather "
          "compiled again after the change, from scratch and from the previous file, each\n"
          "judged by its written file's replay, each timed in a process of its own; wall seconds "
          "beside processor seconds (the compile's and its workers').\n\n")  # recompile.md's own


@dataclass(frozen=True)
class Recompile:
    """One case's numbers: seconds and finish times of both compiles, their ratios."""

    topology: str
    change: str
    scratch_s: float
    scratch_finish_s: float
    scratch_ratio: float | None
    warm_s: float
    warm_finish_s: float
    warm_ratio: float | None
    warm_first_source: str
    scratch_cpu_s: float = 0.0  # processor seconds, the compile's own and its workers'
    warm_cpu_s: float = 0.0
    scratch_first_s: float = 0.0  # when the compile from scratch had its first file
    as_is_ratio: float | None = None  # the previous file replayed on the changed network
    warm_note: str = ""  # what the compile from the previous file says of it (--from: …)
    warm_check_cpu_s: float = 0.0  # the previous file read, its written file verified and
    #                                replayed, alone

    @property
    def check_share(self) -> float | None:
        """Reading the previous file and verifying and replaying the written one over the
        compile from scratch, in processor seconds: what any compile from that file that
        writes this one spends at least."""
        return self.warm_check_cpu_s / self.scratch_cpu_s if self.scratch_cpu_s > 0 else None

    @property
    def time_share(self) -> float:
        return self.warm_s / self.scratch_s

    @property
    def quality(self) -> float:
        return self.warm_finish_s / self.scratch_finish_s

    @property
    def met(self) -> bool:
        return self.time_share <= TIME_GOAL and self.quality <= QUALITY_GOAL


def _change(edit: TopologyEdit) -> str:
    return ", ".join([f"without link {k}" for k in edit.without_links]
                     + [f"without GPU {g}" for g in edit.without_gpus]
                     + [f"link {k} at {f}× its bandwidth" for k, f in edit.scale_links])


def recompile(topology: str, edit: TopologyEdit, tmp: Path) -> Recompile:
    """The case's three compiles (the previous file's is not timed); the two timed ones
    each in a process of its own (:func:`_timed`)."""
    base = load_topology(topology)
    previous = str(tmp / f"{topology}.xml")
    api.compile(base, "allgather", size=SIZE, output=previous, time_limit_s=LIMIT_S)
    changed = edit_topology(base, replace(edit, name=f"{topology}-changed"))
    spawn = multiprocessing.get_context("spawn")
    (s_time, s_cpu, s), (w_time, w_cpu, w) = (
        _in_own_process(spawn, changed, str(tmp / f"{name}.xml"), prior)
        for name, prior in (("scratch", None), ("warm", previous)))
    return Recompile(topology, _change(edit), s_time, s.finish_s, s.ratio, w_time,
                     w.finish_s, w.ratio, w.first_source, s_cpu, w_cpu, s.first_s,
                     _as_is(previous, changed, s.bound_s), w.note, w.check_cpu_s)


@dataclass(frozen=True)
class _Run:
    """What the table shows of one timed compile."""

    finish_s: float
    ratio: float | None
    bound_s: float | None
    first_source: str
    first_s: float
    note: str  # its --from note, if any
    check_cpu_s: float  # processor seconds of reading the previous file, verifying and
    #                     replaying its own (:func:`_check`)


def _in_own_process(spawn: BaseContext, topology: Topology, output: str,
                    previous: str | None) -> tuple[float, float, _Run]:
    """:func:`_timed` in a new process: neither compile finds what the other, or the
    previous file's compile, left in this one (imports done, the bound and the
    topology's routes remembered)."""
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        return pool.submit(_timed, topology, output, previous).result()


def _timed(topology: Topology, output: str, previous: str | None
           ) -> tuple[float, float, _Run]:
    """Wall and processor seconds of one compile (``previous``: with ``--from``) in a
    process that imported :mod:`te_ccl.api` (not timed) and nothing else ran in, and what
    it wrote."""
    extra = {} if previous is None else {"previous": previous}
    start, cpu = time.monotonic(), cpu_s()
    res = api.compile(topology, "allgather", size=SIZE, output=output,
                      time_limit_s=LIMIT_S, **extra)
    wall, cpu = time.monotonic() - start, cpu_s() - cpu
    first = res.incumbents[0] if res.incumbents else None
    return wall, cpu, _Run(res.finish_time_s, res.bound_ratio, res.lower_bound_s,
                           first.source if first else "", first.t_s if first else 0.0,
                           next((n for n in res.schedule.info.notes
                                 if n.startswith("--from:")), ""),
                           _check(output, topology, previous))


def _check(output: str, topology: Topology, previous: str | None, runs: int = 2) -> float:
    """Processor seconds of reading ``previous`` (if any), verifying the written file
    ``output`` and replaying it on ``topology``, one read of it shared as the compile
    shares it: the least of ``runs`` (what the machine's other work adds is not the
    files')."""
    text, took = Path(output).read_text(), []
    for _ in range(runs):
        cpu = cpu_s()
        if previous is not None:
            read_msccl(previous)
        verify_msccl(text, read=lambda algo: simulate_msccl(algo, topology, parse_size(SIZE)))
        took.append(cpu_s() - cpu)
    return min(took)


def _start_cpu_s(runs: int = 3) -> float:
    """Processor seconds of starting Python and importing :mod:`te_ccl.api` in a new
    process, the least of ``runs``."""
    took = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import te_ccl.api"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        took.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return min(took)


def _as_is(previous: str, changed: Topology, bound_s: float | None) -> float | None:
    """The previous file unchanged, replayed on the changed network, over the bound (the
    runtime routes a send whose link is gone through the fabric): what keeping it costs.
    None where its ranks are not the changed network's GPUs (a GPU gone)."""
    algo = read_msccl(previous)
    if bound_s is None or algo.ngpus != changed.ngpus:
        return None
    return simulate_msccl(algo, changed, parse_size(SIZE)).finish_time_s / bound_s


def _markdown(rows: list[Recompile]) -> str:
    lines = ["| topology | change | from scratch | from previous | time share | CPU share | "
             "finish vs scratch | ratio to bound (scratch / previous) | first file | met | "
             "scratch's first file at | previous file as is, ratio to bound | "
             "from previous: note | previous file read, its file verified and replayed "
             "(CPU, share of scratch) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cpu = f"{r.warm_cpu_s / r.scratch_cpu_s:.0%}" if r.scratch_cpu_s > 0 else "-"
        as_is = "-" if r.as_is_ratio is None else f"{r.as_is_ratio:.4f}"
        lines.append(f"| {r.topology} | {r.change} | {r.scratch_s:.2f} s | "
                     f"{r.warm_s:.2f} s | {r.time_share:.0%} | {cpu} | {r.quality:.4f} | "
                     f"{r.scratch_ratio:.4f} / {r.warm_ratio:.4f} | {r.warm_first_source} | "
                     f"{'yes' if r.met else 'no'} | {r.scratch_first_s:.2f} s "
                     f"({r.scratch_first_s / r.scratch_s:.0%}) | {as_is} | "
                     f"{r.warm_note.removeprefix('--from: ') or '-'} | "
                     f"{_check_cell(r)} |")
    return "\n".join(lines) + "\n"


def _start_line(start_s: float) -> str:
    return (f"\nStarting Python and importing te_ccl.api, which `teccl compile` pays before "
            f"either compile (not timed above): {start_s:.2f} s CPU.\n")


def _check_cell(r: Recompile) -> str:
    share = r.check_share
    return "-" if share is None else f"{r.warm_check_cpu_s:.2f} s ({share:.0%})"


@click.command("recompile", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--out", "out_dir", default="bench", show_default=True, metavar="DIR",
              help="Where recompile.json and recompile.md go.")
@click.option("--only", metavar="TOPOLOGY", multiple=True, help="Run only these cases.")
@click.option("--no-fail", is_flag=True, help="Exit 0 even if a target is missed.")
def main(out_dir: str, only: tuple[str, ...], no_fail: bool) -> None:
    """Compile again after one link failure, from scratch and from the previous file."""
    header, rows = provenance.start(), []
    start_s = _start_cpu_s()
    with tempfile.TemporaryDirectory(prefix="teccl-recompile-") as tmp:
        for topology, edit in CASES:
            if only and topology not in only:
                continue
            err_console.print(f"recompile: {topology} {_change(edit)}", highlight=False)
            rows.append(recompile(topology, edit, Path(tmp)))
    folder = make_output_dir(out_dir)
    header = provenance.finish(header)
    write_atomic(str(folder / "recompile.json"), json.dumps({"header": header, "rows": [
        asdict(r) | {"time_share": r.time_share, "quality": r.quality, "met": r.met}
        for r in rows], "start_cpu_s": start_s}, indent=2) + "\n")
    table = _markdown(rows) + _start_line(start_s)
    write_atomic(str(folder / "recompile.md"), provenance.line(header) + "\n\n" + HEADER + table)
    err_console.print(table, highlight=False)
    if not no_fail and not all(r.met for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
