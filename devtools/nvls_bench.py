"""``python -m devtools.nvls_bench``: AllReduce 1 GB with NVLink SHARP against without it.

On each machine whose NVSwitch has NVLS (dgx-h100, gb200-nvl72) two compiles, as a user
runs them: ``--format mscclpp`` (an MSCCL++ plan: the switch reduces and multicasts) and
``--format xml`` (MSCCL XML: the switch only forwards). Each is timed by the replay of
the file written, as its runtime runs it (the plan's: an NVLS sum goes to the reading
GPU and back up to be multicast; the XML's). Targets: the plan's algorithm bandwidth at
least :data:`SPEEDUP_GOAL` × the XML's, and its finish within :data:`BOUND_GOAL` × the
NVLS lower bound (``nvls_s`` of te_ccl.bounds). ``ceiling``: the most any plan can gain,
the XML bound over the NVLS bound. Prints a markdown table (or ``--json``) on stdout;
exits 1 when a target is short, unless ``--no-fail``.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import click

import te_ccl
from te_ccl.errors import TecclError

__all__ = ["MACHINES", "SPEEDUP_GOAL", "BOUND_GOAL", "Row", "run_machine", "main"]

MACHINES = ("dgx-h100", "gb200-nvl72")
SIZE = 10**9
SPEEDUP_GOAL = 1.6
BOUND_GOAL = 1.02
LIMIT_S = 60.0  # each compile's --time-limit (the default)


@dataclass(frozen=True)
class Row:
    """One machine: the NVLS plan's and the MSCCL XML's times (s, each by its file's
    replay: ``measured_by``), and the verdicts."""

    topology: str
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


def _compile(topology: str, fmt: str, out: Path, limit_s: float) -> te_ccl.CompileResult:
    return te_ccl.compile(topology, "allreduce", size=SIZE, chunks="auto", fmt=fmt,
                          time_limit_s=limit_s, output=str(out))


def run_machine(topology: str, limit_s: float = LIMIT_S) -> Row:
    """Compile ``topology``'s AllReduce 1 GB as an MSCCL++ plan and as MSCCL XML, each
    timed by its written file's replay."""
    with tempfile.TemporaryDirectory(prefix="teccl-nvls-") as tmp:
        plan = _compile(topology, "mscclpp", Path(tmp) / "p.json", limit_s)
        xml = _compile(topology, "xml", Path(tmp) / "x.xml", limit_s)
    nvls_s, xml_s = plan.finish_time_s, xml.finish_time_s
    measured = f"{plan.timing.measured_by}, {xml.timing.measured_by}"
    return Row(topology, nvls_s, plan.lower_bound_s, SIZE / nvls_s / 1e9, xml_s,
               SIZE / xml_s / 1e9, xml.lower_bound_s, xml_s / nvls_s,
               nvls_s / plan.lower_bound_s, xml.lower_bound_s / plan.lower_bound_s, measured)


def _table(rows: list[Row]) -> str:
    out = ["| machine | NVLS plan algbw GB/s | MSCCL XML algbw GB/s | speedup "
           f"(goal >= {SPEEDUP_GOAL}; ceiling) | plan / NVLS bound (goal <= {BOUND_GOAL}) | "
           "measured by | met |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.topology} | {r.nvls_algbw_GBps:.1f} | {r.xml_algbw_GBps:.1f} | "
                   f"{r.speedup:.3f} ({r.ceiling:.3f}) | {r.bound_ratio:.4f} | "
                   f"{r.measured_by} | {'met' if r.met else 'short'} |")
    return "\n".join(out)


@click.command("nvls_bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--limit", "limit_s", type=float, default=LIMIT_S, show_default=True,
              metavar="SECONDS", help="Each compile's time limit.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--no-fail", is_flag=True, help="Exit 0 even if a target is short.")
@click.pass_context
def nvls_cmd(ctx: click.Context, limit_s: float, as_json: bool, no_fail: bool) -> None:
    """AllReduce 1 GB with and without NVLink SHARP on dgx-h100 and gb200-nvl72."""
    try:
        rows = [run_machine(t, limit_s) for t in MACHINES]
    except TecclError as e:  # one line, as teccl prints it
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps([asdict(r) | {"met": r.met} for r in rows], indent=2))
    else:
        click.echo(_table(rows))
    if not no_fail and not all(r.met for r in rows):
        ctx.exit(1)


def main() -> None:
    nvls_cmd(prog_name="python -m devtools.nvls_bench")


if __name__ == "__main__":
    main()
