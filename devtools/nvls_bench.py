"""``python -m devtools.nvls_bench``: AllReduce 1 GB with NVLink SHARP against without it.

On each machine whose NVSwitch has NVLS (dgx-h100, gb200-nvl72) two compiles, as a user
runs them: ``--format mscclpp`` (an MSCCL++ plan: the switch reduces and multicasts; the
schedule JSON where the plan writer cannot hold the schedule, as the row says) and
``--format xml`` (MSCCL XML: the switch only forwards). Both are judged by the same
measure, the schedule replay of the schedule each file was written from (the XML's own
replay is shown beside it). Targets: the NVLS schedule's algorithm bandwidth at least
:data:`SPEEDUP_GOAL` × the other's, and its finish within :data:`BOUND_GOAL` × the NVLS
lower bound. Prints a markdown table (or ``--json``) on stdout; exits 1 when a target is
short, unless ``--no-fail``.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import click

import te_ccl
from te_ccl.compiler import Timer
from te_ccl.errors import TecclError

__all__ = ["MACHINES", "SPEEDUP_GOAL", "BOUND_GOAL", "Row", "run_machine", "main"]

MACHINES = ("dgx-h100", "gb200-nvl72")
SIZE = 10**9
SPEEDUP_GOAL = 1.6
BOUND_GOAL = 1.02
LIMIT_S = 60.0  # each compile's --time-limit (the default)


@dataclass(frozen=True)
class Row:
    """One machine: the NVLS plan's and the MSCCL XML's times (s), and the verdicts."""

    topology: str
    nvls_format: str
    nvls_s: float
    nvls_bound_s: float
    nvls_algbw_GBps: float
    xml_schedule_s: float
    xml_replay_s: float | None
    xml_algbw_GBps: float
    xml_bound_s: float
    speedup: float
    bound_ratio: float
    measured_by: str

    @property
    def met(self) -> bool:
        return self.speedup >= SPEEDUP_GOAL and self.bound_ratio <= BOUND_GOAL


def _compile(topology: str, fmt: str, out: Path, limit_s: float) -> te_ccl.CompileResult:
    return te_ccl.compile(topology, "allreduce", size=SIZE, chunks="auto", fmt=fmt,
                          time_limit_s=limit_s, output=str(out))


def run_machine(topology: str, limit_s: float = LIMIT_S) -> Row:
    """Compile ``topology``'s AllReduce 1 GB as an MSCCL++ plan (where the plan writer
    cannot hold the schedule, as the schedule JSON it would be written from, noted in
    ``nvls_format``) and as MSCCL XML."""
    with tempfile.TemporaryDirectory(prefix="teccl-nvls-") as tmp:
        try:
            fmt, plan = "mscclpp", _compile(topology, "mscclpp", Path(tmp) / "p.json", limit_s)
        except TecclError as e:
            fmt = f"json (no MSCCL++ plan: {e})"
            plan = _compile(topology, "json", Path(tmp) / "s.json", limit_s)
        xml = _compile(topology, "xml", Path(tmp) / "x.xml", limit_s)
    replay = Timer(xml=False)  # one measure for both: the schedule replay
    nvls_s = replay.timing(plan.schedule).finish_s
    xml_s = replay.timing(xml.schedule).finish_s
    return Row(topology, fmt, nvls_s, plan.lower_bound_s, SIZE / nvls_s / 1e9, xml_s,
               xml.timing.xml_s, SIZE / xml_s / 1e9, xml.lower_bound_s, xml_s / nvls_s,
               nvls_s / plan.lower_bound_s, "schedule replay")


def _table(rows: list[Row]) -> str:
    out = ["| machine | NVLS written as | NVLS algbw GB/s | without NVLS algbw GB/s (XML replay s) | speedup "
           f"(goal >= {SPEEDUP_GOAL}) | NVLS / NVLS bound (goal <= {BOUND_GOAL}) | met |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        replay = f"{r.xml_replay_s:.4g}" if r.xml_replay_s is not None else "not replayed"
        out.append(f"| {r.topology} | {r.nvls_format} | {r.nvls_algbw_GBps:.1f} | "
                   f"{r.xml_algbw_GBps:.1f} "
                   f"({replay}) | {r.speedup:.3f} | {r.bound_ratio:.4f} | "
                   f"{'met' if r.met else 'short'} |")
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
