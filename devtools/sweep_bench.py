"""How well the local executor scales: one sweep with 1 worker, then with 2.

``make bench`` calls :func:`sweep_speedup` (target: ≥ 1.8× with 2 workers on a
40-point sweep). Wall times include starting the worker processes, as a user sees them.
Run by hand: ``python -m devtools.sweep_bench [--quick] [--points N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

from te_ccl.sweep.driver import plan_sweep, run_sweep
from te_ccl.sweep.executors import LocalExecutor
from te_ccl.sweep.grid import CollectiveEntry, Grid, SizeRange
from te_ccl.sweep.points import Point, expand_grid
from te_ccl.sweep.store import ResultStore

__all__ = ["bench_points", "sweep_speedup", "QUICK_POINTS"]

QUICK_POINTS = 8


def bench_points(points: int = 40) -> list[Point]:
    """The first ``points`` of a library-style grid: 16-GPU topologies, solves of 0.05–5 s.

    Some points end on the solver's time budget for its second goal (deliver early), as
    in real sweeps; the 10 s limit keeps that part short.
    """
    sizes = (SizeRange(0, 64_000, 16_000, "sizes[0]"), SizeRange(64_000, None, 64_000, "sizes[1]"))
    collectives = (CollectiveEntry("alltoall", key="collectives[0]"),
                   CollectiveEntry("broadcast", root="0", key="collectives[1]"),
                   CollectiveEntry("allgather", key="collectives[2]"))
    grid = Grid(file="<bench>", name="bench", topologies=("mesh4x4", "torus4x4", "dgx2", "dgx1"),
                collectives=collectives, sizes=sizes, chunks=(1, 2), time_limit_s=10.0)
    available = expand_grid(grid)
    if not 1 <= points <= len(available):
        raise ValueError(f"expected 1..{len(available)} points, got {points}")
    return available[:points]


def _timed_sweep(points: list[Point], workers: int) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of all points, points ok) of one fresh sweep."""
    with tempfile.TemporaryDirectory(prefix="teccl-sweep-bench-") as out:
        store = ResultStore(out)
        start = time.perf_counter()
        outcome = run_sweep(plan_sweep(points, store), store, LocalExecutor(workers))
        wall = time.perf_counter() - start
    cpu = sum(r.get("cpu_time_s") or 0.0 for r in outcome.records.values())
    return wall, cpu, outcome.counts["ok"]


def sweep_speedup(points: int = 40, workers: int = 2, repeat: int = 1) -> dict[str, Any]:
    """Wall time of the same fresh sweep with 1 and with ``workers`` local workers.

    With ``repeat`` > 1 the two runs alternate and the best time of each counts: on a
    shared machine the minimum is the least disturbed measurement. ``cpu_util_*`` is
    the points' CPU seconds per wall second: about 1 per worker on an idle machine; if
    it does not grow with the worker count, other load took the CPU, not the executor
    (Linux autogroup shares the CPU fairly between sessions, so on a machine kept busy
    by other sessions a second worker process gets no extra CPU time).
    """
    pts = bench_points(points)
    runs: dict[int, list[tuple[float, float]]] = {1: [], workers: []}
    ok = len(pts)
    for _ in range(repeat):
        for w in runs:
            wall, busy, n_ok = _timed_sweep(pts, w)
            runs[w].append((wall, busy))
            ok = min(ok, n_ok)
    (t1, cpu1), (tn, cpun) = min(runs[1]), min(runs[workers])
    return {"bench": "sweep_speedup", "points": len(pts), "workers": workers, "repeat": repeat,
            "ok": ok, "t1_s": round(t1, 3), f"t{workers}_s": round(tn, 3),
            "cpu_util_1": round(cpu1 / t1, 3), f"cpu_util_{workers}": round(cpun / tn, 3),
            "speedup": round(t1 / tn, 3), "target": 1.8, "met": t1 / tn >= 1.8}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_POINTS} points instead of 40 (a smoke run)")
    parser.add_argument("--points", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="alternate runs, keep the best")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    n = args.points or (QUICK_POINTS if args.quick else 40)
    result = sweep_speedup(n, args.workers, args.repeat)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['points']}-point sweep: {result['t1_s']:.1f}s with 1 worker, "
              f"{result[f't{args.workers}_s']:.1f}s with {args.workers}: "
              f"{result['speedup']:.2f}x (target 1.8x)")


if __name__ == "__main__":
    main()
