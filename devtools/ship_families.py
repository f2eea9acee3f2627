"""``make schedules`` (second half): size-ranged algorithm families for the shipped
multi-node machines.

``python -m devtools.ship_families DIR`` compiles, for each machine of :data:`MACHINES`
and each collective of :data:`KINDS`, one algorithm per message-size range of
``--sizes`` (:func:`te_ccl.compiler.compile_size_library`: cut at powers of 4, merged
where neighbouring ranges compile to the same schedule), in both buffer modes, into
``DIR/MACHINE/MACHINE-KIND[-inplace]-MIN-MAX.xml``. Every file is verified before it is
written, with at most :data:`MAX_SUBCHUNKS` sub-chunks per chunk; ``DIR/index.csv`` lists each with its range and the replay of its XML at the
size it was compiled for. A family with a file over ``--max-file-size`` is listed as
skipped and its files removed, which keeps the directory small enough to commit.

Copying one machine's files into ``MSCCL_ALGO_DIR`` lets the runtime choose by
collective, buffer mode and message size (``minBytes ≤ size ≤ maxBytes``).
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import replace
from pathlib import Path

import click

from te_ccl.backends.base import SolveParams
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import parse_size_range
from te_ccl.errors import TecclError
from te_ccl.outputs import write_atomic
from te_ccl.spec.topology import load_topology, shipped_topologies
from te_ccl.units import parse_size

__all__ = ["MACHINES", "KINDS", "FIELDS", "ship_family", "ship_families"]

MACHINES = ("aws-p4dx2", "aws-p5x2")  # two-node machines whose families schedules/ tracks;
#                                       any other shipped one on demand (--topology)
KINDS = ("allgather", "reducescatter", "allreduce", "alltoall")
SIZES = "64KiB..256MiB"
MAX_SUBCHUNKS = 2  # sub-chunks per chunk: each one more adds the steps, and the bytes, of a
#                    whole algorithm to every file, for a few % of pipelining
FIELDS = ("topology", "collective", "inplace", "status", "min_bytes", "max_bytes", "file",
          "compiled_bytes", "finish_time_s", "measured_by", "bound_ratio", "algbw_GBps",
          "reason")


def ship_family(machine: str, kind: str, inplace: bool, out_dir: Path, low: int, high: int,
                params: SolveParams, max_file_bytes: int | None = None) -> list[dict]:
    """One family's index rows (one per size range, or one skipped row naming why). A
    family with a file over ``max_file_bytes`` is compiled again with whole chunks (one
    sub-chunk each) before it is skipped."""
    from te_ccl.compiler import compile_size_library, summary

    topo = load_topology(machine)
    base = {"topology": machine, "collective": kind, "inplace": inplace}
    coll = Collective(CollectiveKind(kind), low, tuple(range(topo.ngpus)), inplace=inplace)
    try:
        results = compile_size_library(topo, coll, params, low, high, str(out_dir / machine))
    except TecclError as e:
        return [{**base, "status": "skipped", "reason": f"{type(e).__name__}: {e}"}]
    files = [Path(r.output) for r in results]
    largest = max(files, key=lambda f: f.stat().st_size)
    size = largest.stat().st_size
    if max_file_bytes is not None and size > max_file_bytes:
        for f in files:
            f.unlink()
        if (params.max_subchunks or 2) > 1:  # whole chunks make the smallest files
            return ship_family(machine, kind, inplace, out_dir, low, high,
                               replace(params, max_subchunks=1), max_file_bytes)
        return [{**base, "status": "skipped", "reason": f"over the size budget: {largest.name} "
                 f"is {size / 2**10:.0f} KiB, the budget is {max_file_bytes / 2**10:.0f} KiB"}]
    rows = []
    for r, f in zip(results, files, strict=True):
        info = summary(r, topo)
        rows.append({**base, "status": "ok", "min_bytes": r.min_bytes, "max_bytes": r.max_bytes,
                     "file": f"{machine}/{f.name}", "compiled_bytes": info["size_bytes"],
                     "finish_time_s": info["finish_time_s"], "measured_by": info["measured_by"],
                     "bound_ratio": info["bound_ratio"], "algbw_GBps": info["algbw_GBps"],
                     "reason": ""})
    return rows


def ship_families(out_dir: Path, *, sizes: str = SIZES, machines: tuple[str, ...] = MACHINES,
                  kinds: tuple[str, ...] = KINDS, time_limit_s: float = 5.0,
                  max_subchunks: int = MAX_SUBCHUNKS, max_file_bytes: int | None = None,
                  log=lambda msg: None) -> list[dict]:
    """Every family of ``machines`` × ``kinds`` × both buffer modes; writes ``index.csv``
    (rows of families not rebuilt in this run are kept) and returns this run's rows."""
    low, high = parse_size_range(sizes)
    params = SolveParams(time_limit_s=time_limit_s, threads=1, max_subchunks=max_subchunks)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for machine in machines:
        for kind in kinds:
            for inplace in (False, True):
                got = ship_family(machine, kind, inplace, out_dir, low, high, params,
                                  max_file_bytes)
                mode = "in place" if inplace else "out of place"
                log(f"{machine} {kind} {mode}: {got[0]['status']} ({len(got)} file(s))"
                    if got[0]["status"] == "ok" else
                    f"{machine} {kind} {mode}: skipped: {got[0]['reason']}")
                rows += got
    done = {(r["topology"], r["collective"], str(r["inplace"])) for r in rows}
    index = out_dir / "index.csv"
    kept = [r for r in _read_index(index) if (r["topology"], r["collective"], r["inplace"])
            not in done]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(kept + rows)
    write_atomic(index, buf.getvalue())
    return rows


def _read_index(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@click.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--sizes", default=SIZES, show_default=True, metavar="LOW..HIGH",
              help="The message sizes each family covers.")
@click.option("--topology", "machines", multiple=True,
              type=click.Choice(sorted(shipped_topologies())), metavar="NAME",
              help="These shipped machines instead of the default ones.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS), help="Only these.")
@click.option("--time-limit", type=float, default=5.0, show_default=True, metavar="SECONDS",
              help="Solver time limit of each size range.")
@click.option("--max-subchunks", type=click.IntRange(1), default=MAX_SUBCHUNKS,
              show_default=True, help="Most sub-chunks per chunk the scale backend may cut.")
@click.option("--max-file-size", metavar="SIZE", help="Skip families with a file larger "
              "than this (e.g. 256KiB), so the directory stays small enough to commit.")
def main(out_dir: str, sizes: str, machines: tuple[str, ...], kinds: tuple[str, ...],
         time_limit: float, max_subchunks: int, max_file_size: str | None) -> None:
    """Compile the size-ranged algorithm families of the multi-node machines into OUT_DIR."""
    rows = ship_families(Path(out_dir), sizes=sizes, machines=machines or MACHINES,
                         kinds=kinds or KINDS, time_limit_s=time_limit,
                         max_subchunks=max_subchunks, max_file_bytes=parse_size(max_file_size) if max_file_size else None,
                         log=lambda m: click.echo(m, err=True))
    ok = sum(r["status"] == "ok" for r in rows)
    click.echo(f"{ok} algorithm(s) written into {out_dir}", err=True)


if __name__ == "__main__":
    sys.exit(main())
