"""How much time the MSCCL lowering loses: schedule replay against the replay of its XML.

For each case this solves the collective as ``teccl compile`` does (``solve_best`` with
the case's backend, ``--chunks auto``'s candidates where the case says ``auto``, and
``render_fitting``: solved again with fewer sub-chunks where the runtime cannot hold a
scale schedule's), replays the schedule
(``te_ccl.simulate.simulate_schedule``), lowers it (``lower_to_msccl``), replays the XML
(``te_ccl.simulate.msccl.simulate_msccl``) and runs the verifier at the protocol's real
buffering (``MSCCL.outstanding_sends``). Columns: schedule replay, XML replay, their
ratio, the lowering's notes, and the verifier's verdict::

    python -m devtools.lowering_gap [--only NAME …] [--time-limit S] [--save DIR | --load DIR]

A case whose backend is ``baseline:NAME`` builds that template (as ``make bench`` does,
on the topology's forward-only switches) instead of solving: those rows are exact.

Gather and Scatter: the file's ``count`` is one rank's piece (mult 1, as the runtime reads it; the
verifier's layout), while ``simulate_msccl`` divides the collective's size (N pieces) by
``nchunksperloop``; their rows also show the replay at ``count`` = one piece.

Solves are timed by wall clock, so under load the schedules (and numbers) may differ
between runs; ``--save DIR`` keeps the solved schedules as JSON and ``--load DIR`` replays
exactly those again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# name: (topology, collective, size, chunks: "auto" or chunks per rank, in place[, backend])
CASES = {
    "ring8-alltoall-1MB": ("ring8", "alltoall", "1MB", 1, False),
    "ring8-alltoall-1MB-inplace": ("ring8", "alltoall", "1MB", 1, True),
    "ndv2x2-alltoall-1MB": ("ndv2x2", "alltoall", "1MB", 1, False),
    "dgx1-allgather-64MB-auto": ("dgx1", "allgather", "64MB", "auto", False),
    "dgx1-allgather-1GB-auto": ("dgx1", "allgather", "1GB", "auto", False),
    "torus4x4-allgather-1GB-auto": ("torus4x4", "allgather", "1GB", "auto", False),
    "mesh4x4-allgather-1GB-auto": ("mesh4x4", "allgather", "1GB", "auto", False),
    "ndv2x2-allgather-1GB-auto": ("ndv2x2", "allgather", "1GB", "auto", False),
    "dgx1-allreduce-1GiB": ("dgx1", "allreduce", "1GiB", 1, False),
    "dgx1-gather-1MB": ("dgx1", "gather", "1MB", 1, False),
    "dgx1-scatter-1MB": ("dgx1", "scatter", "1MB", 1, False),
    "mesh8x8-allgather-1GiB": ("mesh8x8", "allgather", "1GiB", 1, False),
    "aws-p4dx2-allgather-1GB-scale": ("aws-p4dx2", "allgather", "1GB", 1, False, "scale"),
    "aws-p4dx2-allreduce-1GB-scale": ("aws-p4dx2", "allreduce", "1GB", 1, False, "scale"),
    "aws-p5x2-allreduce-1GB-scale": ("aws-p5x2", "allreduce", "1GB", 1, False, "scale"),
    "hgx-h100x2-allreduce-1GB": ("hgx-h100x2", "allreduce", "1GB", 1, False),
    "hgx-h100x16-allreduce-1GB": ("hgx-h100x16", "allreduce", "1GB", 1, False),
    # small (latency-bound) sizes, where the epochs round every hop up the most
    "mesh4x4-reducescatter-1kB": ("mesh4x4", "reducescatter", "1000B", 1, False, "milp"),
    "mesh4x4-allreduce-1kB": ("mesh4x4", "allreduce", "1000B", 1, False, "milp"),
    "ndv2x2-allgather-1kB-ring": ("ndv2x2", "allgather", "1000B", 1, False, "baseline:ring"),
    "ndv2x2-allgather-1kB-ring-bidir": ("ndv2x2", "allgather", "1000B", 1, False,
                                        "baseline:ring-bidir"),
    "ndv2x2-allgather-64kB-ring": ("ndv2x2", "allgather", "64000B", 1, False, "baseline:ring"),
    "ndv2x2-allgather-64kB-ring-bidir": ("ndv2x2", "allgather", "64000B", 1, False,
                                         "baseline:ring-bidir"),
    "ndv2x2-allgather-64kB-hierarchical": ("ndv2x2", "allgather", "64000B", 1, False,
                                           "baseline:hierarchical"),
    "ndv2x2-allgather-1MB-ring": ("ndv2x2", "allgather", "1MB", 1, False, "baseline:ring"),
    "ndv2x2-allgather-1MB-hierarchical": ("ndv2x2", "allgather", "1MB", 1, False,
                                          "baseline:hierarchical"),
    "ndv2x2-allgather-16MB-ring": ("ndv2x2", "allgather", "16MB", 1, False, "baseline:ring"),
    "ndv2x2-allgather-1GB-ring": ("ndv2x2", "allgather", "1GB", 1, False, "baseline:ring"),
    "ndv2x2-allgather-1GB-4-ring": ("ndv2x2", "allgather", "1GB", 4, False, "baseline:ring"),
    "ndv2x2-alltoall-1kB-direct": ("ndv2x2", "alltoall", "1000B", 1, False, "baseline:direct"),
    "ndv2x2-alltoall-1kB-ring": ("ndv2x2", "alltoall", "1000B", 1, False, "baseline:ring"),
    "ring8-alltoall-1GB-direct": ("ring8", "alltoall", "1GB", 1, False, "baseline:direct"),
}


def schedule_of(name: str, time_limit: float, load: Path | None):
    from te_ccl.baselines import build_baseline
    from te_ccl.compiler import (
        BASE_CHUNKS,
        CompileOptions,
        SolveParams,
        forward_only,
        render_fitting,
        solve_best,
    )
    from te_ccl.schedule import Schedule
    from te_ccl.spec.collective import load_collective
    from te_ccl.spec.topology import load_topology

    topo_name, kind, size, chunks, inplace, *backend = CASES[name]
    topo = load_topology(topo_name)
    if load is not None:
        return Schedule.from_json((load / f"{name}.json").read_text(), topo)
    rooted = {"root": 0} if kind in ("gather", "scatter") else {}
    coll = load_collective(topo, None, collective=kind, size=size, inplace=inplace,
                           chunks=1 if chunks == "auto" else chunks, **rooted)
    if backend and backend[0].startswith("baseline:"):
        return build_baseline(backend[0].split(":", 1)[1], forward_only(topo), coll)
    choices = BASE_CHUNKS if chunks == "auto" else ()
    params = SolveParams(backend=backend[0] if backend else "auto", time_limit_s=time_limit)
    schedule = solve_best(topo, coll, params, choices)
    return render_fitting(schedule, CompileOptions(), params)[0]  # as the compile writes it


def measure(schedule) -> dict:
    from te_ccl.lower.msccl import build_program
    from te_ccl.lower.msccl.to_xml import program_to_xml
    from te_ccl.runtime_limits import MSCCL
    from te_ccl.simulate import simulate_schedule
    from te_ccl.simulate.msccl import simulate_msccl
    from te_ccl.verify.msccl.reader import read_msccl
    from te_ccl.verify.msccl.verify import verify_msccl

    coll = schedule.collective
    program = build_program(schedule)
    xml = program_to_xml(program).decode()
    sched_s = simulate_schedule(schedule).finish_time_s
    algo = read_msccl(xml)
    xml_s = simulate_msccl(algo, schedule.topology, coll.size_bytes).finish_time_s
    piece_s = None
    if coll.kind.value in ("gather", "scatter"):
        piece = coll.size_bytes // coll.nranks
        piece_s = simulate_msccl(algo, schedule.topology, piece).finish_time_s
    root = coll.ranks.index(coll.root) if coll.root is not None else None
    slots = MSCCL.outstanding_sends(program.proto)
    report = verify_msccl(xml, root=root)
    verdict = "ok" if report.valid else f"INVALID: {report.errors[0]}"
    return {"schedule_s": sched_s, "xml_s": xml_s, "piece_s": piece_s, "notes": program.notes,
            "verify": f"{verdict} ({slots} slots, {program.proto})"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=sorted(CASES), default=None)
    ap.add_argument("--time-limit", type=float, default=30.0)
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--save", type=Path, help="keep the solved schedules here as JSON")
    group.add_argument("--load", type=Path, help="replay the schedules saved here")
    args = ap.parse_args(argv)
    print(f"{'case':32} {'schedule':>13} {'xml':>13} {'xml/sched':>9}  verify / notes")
    for name in args.only or CASES:
        schedule = schedule_of(name, args.time_limit, args.load)
        if args.save is not None:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{name}.json").write_text(schedule.to_json())
        m = measure(schedule)
        ratio = m["xml_s"] / m["schedule_s"]
        print(f"{name:32} {m['schedule_s'] * 1e6:11.3f}us {m['xml_s'] * 1e6:11.3f}us "
              f"{ratio:9.4f}  {m['verify']}", flush=True)
        if m["piece_s"] is not None:
            print(f"{'':32} {'':13} {m['piece_s'] * 1e6:11.3f}us "
                  f"{m['piece_s'] / m['schedule_s']:9.4f}  (count = one rank's piece)")
        for note in m["notes"]:
            print(f"{'':32} note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
