"""``python -m devtools.small_alltoall``: small AlltoAll on every shipped 8–32-GPU topology.

Each row is ``teccl compile TOPOLOGY -c alltoall -s SIZE`` at the default time limit, as
a user runs it (``te_ccl.compile`` with an output file, so the ratio is the written
XML's replay over the bound; a schedule's replay on fabrics with reducing switches,
which XML cannot express, as ``teccl compile`` writes them), once with the default chunking and once with
``--chunks auto``. Prints a markdown table: the ratio, the bound and the argument that
sets it, the template kept, and the compile's CPU seconds (the machine is shared: wall
time says little; the rows share one process, so a row may reuse what an earlier one
computed). ``--topology`` and ``--size`` narrow the rows.
"""

from __future__ import annotations

import tempfile
import time

import click

from devtools.suites import SMALL_ALLTOALL_GOAL
from te_ccl.deadline import cpu_s

__all__ = ["main", "topologies"]

SIZES = ("1KB", "64KB")


def topologies() -> list[str]:
    """The shipped topologies with 8 to 32 GPUs, by GPU count then name."""
    from te_ccl.spec.topology import load_topology, shipped_topologies

    counts = {t: load_topology(t).ngpus for t in shipped_topologies()}
    return sorted((t for t, n in counts.items() if 8 <= n <= 32), key=lambda t: (counts[t], t))


def _row(topology: str, size: str, chunks: str | None, limit_s: float) -> str:
    import te_ccl
    from te_ccl.errors import TecclError
    from te_ccl.spec.topology import load_topology

    fmt = "json" if load_topology(topology).reducing_switches else "xml"  # as teccl picks
    cpu, wall = cpu_s(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="teccl-small-a2a-") as tmp:
        try:
            res = te_ccl.compile(topology, "alltoall", size=size, chunks=chunks,
                                 time_limit_s=limit_s, output=f"{tmp}/out.{fmt}", fmt=fmt)
        except TecclError as e:
            return f"| {topology} | {size} | {chunks or '-'} | exit {e.exit_code} | | | | | | |"
    cpu, wall = cpu_s() - cpu, time.monotonic() - wall
    parts = res.bound_parts
    by = max(parts, key=parts.__getitem__)
    ratio = res.bound_ratio
    met = "yes" if ratio is not None and ratio <= SMALL_ALLTOALL_GOAL else "no"
    return (f"| {topology} | {size} | {chunks or '-'} | {ratio:.4f} | {met} "
            f"| {res.lower_bound_s * 1e6:.3f} | {by} | {res.backend} "
            f"| {res.schedule.collective.chunks_per_rank} | {cpu:.1f} / {wall:.1f} |")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topology", "names", multiple=True, metavar="NAME",
              help="Only these topologies (repeatable; default: every shipped 8-32-GPU one).")
@click.option("--size", "sizes", multiple=True, default=SIZES, show_default=True,
              help="AlltoAll sizes (repeatable).")
@click.option("--time-limit", "limit_s", type=float, default=60.0, show_default=True,
              help="Each compile's limit (teccl compile's default).")
def main(names: tuple[str, ...], sizes: tuple[str, ...], limit_s: float) -> None:
    """Print the table, one row per topology, size and chunking."""
    click.echo("| topology | size | chunks | ratio | ≤ 1.05 | bound µs | bound by | kept "
               "| chunks/rank | CPU / wall s |")
    click.echo("|---|---|---|---|---|---|---|---|---|---|")
    for t in names or topologies():
        for size in sizes:
            for chunks in (None, "auto"):
                click.echo(_row(t, size, chunks, limit_s))


if __name__ == "__main__":
    main()
