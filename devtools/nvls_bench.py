"""``python -m devtools.nvls_bench``: AllReduce 1 GB with NVLink SHARP against without it.

On each machine whose NVSwitch has NVLS (dgx-h100, gb200-nvl72) two compiles, as a user
runs them: ``--format mscclpp`` (an MSCCL++ plan: the switch reduces and multicasts) and
``--format xml`` (MSCCL XML: the switch only forwards), each file then replayed here
(the compile may have judged a large schedule by its own replay, where an NVLS sum stays
in the switch). gb200-nvl72's plan is compiled
with ``--backend rounds --chunks 1`` (:data:`MACHINES`): ``auto`` there races a flow model
that, on a loaded machine, is not ready within the time limit, and the file kept then is
the ring's; the rounds schedule does not depend on the machine's speed. Each file is timed
as its runtime runs it (the plan's: an NVLS sum goes to the reading GPU and
back up to be multicast; the XML's). Targets: the plan's algorithm bandwidth at least
:data:`SPEEDUP_GOAL` × the XML's, and its finish within :data:`BOUND_GOAL` × the NVLS lower
bound (``nvls_s`` of te_ccl.bounds). ``ceiling``: the XML's replay over the NVLS bound, the
most any plan can gain over that XML (a plan takes at least the bound).

Across boxes (:data:`BOXES`: hgx-h100x2, hgx-h100x4) the plan of
:func:`te_ccl.lower.mscclpp.box_allreduce_plan` (NVLS inside each box, the NICs between),
written, checked by the plan checker and replayed, against the lower bound and the
compiled MSCCL XML; ``link_s``: the busiest link's busy time in the plan's replay. These
rows have no target.

Prints markdown tables (or ``--json``: ``{"header": ..., "nvls": [...], "boxes": [...]}``,
the header saying the run's commit, load and command, :mod:`devtools.provenance`) on stdout;
exits 1 when a target is short, unless ``--no-fail``.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

import te_ccl
from devtools import provenance
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import TecclError, VerificationError
from te_ccl.lower.mscclpp import box_allreduce_plan
from te_ccl.outputs import write_atomic
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.simulate.plan import simulate_plan
from te_ccl.spec.topology import load_topology
from te_ccl.topology.model import Topology
from te_ccl.verify.mscclpp import plan_json, verify_plan_file

__all__ = ["MACHINES", "BOXES", "SPEEDUP_GOAL", "BOUND_GOAL", "Row", "BoxRow", "run_machine",
           "run_boxes", "box_plan", "main"]

# each machine's plan compile: its arguments beyond the size and format
MACHINES: dict[str, dict[str, Any]] = {"dgx-h100": {"chunks": "auto"},
                                       "gb200-nvl72": {"chunks": 1, "backend": "rounds"}}
BOXES = ("hgx-h100x2", "hgx-h100x4")
SIZE = 10**9
SPEEDUP_GOAL = 1.6
BOUND_GOAL = 1.02
LIMIT_S = 60.0  # each compile's --time-limit (the default)


@dataclass(frozen=True)
class Row:
    """One machine: the NVLS plan's and the MSCCL XML's times (s, each by its file's
    replay: ``measured_by``), and the verdicts."""

    topology: str
    plan_args: str
    nvls_s: float
    nvls_bound_s: float
    nvls_algbw_GBps: float
    xml_s: float
    xml_algbw_GBps: float
    xml_bound_s: float
    speedup: float
    bound_ratio: float
    ceiling: float
    measured_by: str

    @property
    def met(self) -> bool:
        return self.speedup >= SPEEDUP_GOAL and self.bound_ratio <= BOUND_GOAL


@dataclass(frozen=True)
class BoxRow:
    """Boxes of NVLS GPUs: the box plan's replay against the bound and the XML's."""

    topology: str
    plan_s: float
    bound_s: float
    bound_ratio: float
    link_s: float
    xml_s: float
    speedup: float
    measured_by: str


def _args(options: dict[str, Any]) -> str:
    return " ".join(f"--{k} {v}" for k, v in options.items())


def _compile(topology: Topology, fmt: str, out: Path, limit_s: float, **options: Any
             ) -> te_ccl.CompileResult:
    options = {"chunks": "auto"} | options
    return te_ccl.compile(topology, "allreduce", size=SIZE, fmt=fmt, time_limit_s=limit_s,
                          output=str(out), **options)


def run_machine(topology: str, limit_s: float = LIMIT_S) -> Row:
    """Compile ``topology``'s AllReduce 1 GB as an MSCCL++ plan and as MSCCL XML, each
    timed by the replay of the file written (the compile verified both)."""
    options = MACHINES.get(topology, {})
    topo = load_topology(topology)
    with tempfile.TemporaryDirectory(prefix="teccl-nvls-") as tmp:
        plan_path, xml_path = Path(tmp) / "p.json", Path(tmp) / "x.xml"
        plan = _compile(topo, "mscclpp", plan_path, limit_s, **options)
        xml = _compile(topo, "xml", xml_path, limit_s)
        nvls_s = simulate_plan(plan_json(plan_path.read_text(), str(plan_path)), topo, SIZE,
                               checked=True).finish_time_s
        xml_s = simulate_msccl(xml_path, topo, SIZE).finish_time_s
    return Row(topology, _args(options), nvls_s, plan.lower_bound_s, SIZE / nvls_s / 1e9,
               xml_s, SIZE / xml_s / 1e9, xml.lower_bound_s, xml_s / nvls_s,
               nvls_s / plan.lower_bound_s, xml_s / plan.lower_bound_s,
               "plan replay, xml replay")


def box_plan(topo: Topology, path: Path) -> tuple[float, float]:
    """Write ``topo``'s box AllReduce plan to ``path``, check it as ``teccl verify``
    does and replay it at :data:`SIZE`: (finish, the busiest link's busy time), in s."""
    write_atomic(path, box_allreduce_plan(topo))
    report = verify_plan_file(path)
    if not report.valid:
        raise VerificationError(f"{path}: {report.errors[0]}")
    result = simulate_plan(plan_json(path.read_text(), str(path)), topo, SIZE, checked=True)
    return result.finish_time_s, max(u.busy_s for u in result.links)


def run_boxes(topology: str, limit_s: float = LIMIT_S) -> BoxRow:
    """The box plan of ``topology`` and its compiled MSCCL XML, each by its replay."""
    topo = load_topology(topology)
    bound = lower_bound(topo, Collective(CollectiveKind.ALLREDUCE, SIZE,
                                         tuple(range(topo.ngpus)), 1)).seconds
    with tempfile.TemporaryDirectory(prefix="teccl-nvls-") as tmp:
        plan_s, link_s = box_plan(topo, Path(tmp) / "p.json")
        xml_path = Path(tmp) / "x.xml"
        _compile(topo, "xml", xml_path, limit_s)
        xml_s = simulate_msccl(xml_path, topo, SIZE).finish_time_s
    return BoxRow(topology, plan_s, bound, plan_s / bound, link_s, xml_s, xml_s / plan_s,
                  "plan replay, xml replay")


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _table(rows: list[Row]) -> str:
    return _markdown(
        ["machine", "plan compiled with", "NVLS plan algbw GB/s", "MSCCL XML algbw GB/s",
         f"speedup (goal >= {SPEEDUP_GOAL}; ceiling)",
         f"plan / NVLS bound (goal <= {BOUND_GOAL})", "measured by", "met"],
        [[r.topology, r.plan_args, f"{r.nvls_algbw_GBps:.1f}", f"{r.xml_algbw_GBps:.1f}",
          f"{r.speedup:.3f} ({r.ceiling:.3f})", f"{r.bound_ratio:.4f}", r.measured_by,
          "met" if r.met else "short"] for r in rows])


def _box_table(rows: list[BoxRow]) -> str:
    return _markdown(
        ["machine", "box plan ms", "bound ms", "plan / bound", "busiest link ms",
         "MSCCL XML ms", "speedup", "measured by"],
        [[r.topology, f"{r.plan_s * 1e3:.3f}", f"{r.bound_s * 1e3:.3f}", f"{r.bound_ratio:.3f}",
          f"{r.link_s * 1e3:.3f}", f"{r.xml_s * 1e3:.3f}", f"{r.speedup:.3f}", r.measured_by]
         for r in rows])


@click.command("nvls_bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--limit", "limit_s", type=float, default=LIMIT_S, show_default=True,
              metavar="SECONDS", help="Each compile's time limit.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--no-fail", is_flag=True, help="Exit 0 even if a target is short.")
@click.pass_context
def nvls_cmd(ctx: click.Context, limit_s: float, as_json: bool, no_fail: bool) -> None:
    """AllReduce 1 GB with and without NVLink SHARP on dgx-h100 and gb200-nvl72, and
    across boxes on hgx-h100x2 and hgx-h100x4."""
    header = provenance.start()
    try:
        rows = [run_machine(t, limit_s) for t in MACHINES]
        boxes = [run_boxes(t, limit_s) for t in BOXES]
    except TecclError as e:  # one line, as teccl prints it
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps({"header": provenance.finish(header),
                               "nvls": [asdict(r) | {"met": r.met} for r in rows],
                               "boxes": [asdict(r) for r in boxes]}, indent=2))
    else:
        click.echo(_table(rows) + "\n\n" + _box_table(boxes))
    if not no_fail and not all(r.met for r in rows):
        ctx.exit(1)


def main() -> None:
    nvls_cmd(prog_name="python -m devtools.nvls_bench")


if __name__ == "__main__":
    main()
