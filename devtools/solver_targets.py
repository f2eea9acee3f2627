"""Measure the solver targets: small topologies proven optimal, NDv2 near the cut bound (not a test: prints one line per case).

usage: python -m devtools.solver_targets [small|ndv2x2|ndv2x4|all] [--threads N]
"""

from __future__ import annotations

import argparse
import time

from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.spec.topology import load_topology
from te_ccl.verify.schedule_check import check_schedule


def run(name: str, kind: str, size: int, chunks: int, params: SolveParams) -> None:
    topo = load_topology(name)
    root = 0 if kind == "broadcast" else None
    coll = Collective(CollectiveKind(kind), size, tuple(range(topo.ngpus)), chunks, root=root)
    t0 = time.monotonic()
    s = solve(topo, coll, params)
    wall = time.monotonic() - t0
    bound = lower_bound(topo, coll).seconds
    bad = check_schedule(s)
    print(f"{name:9s} {kind:9s} c={chunks} {s.info.backend:6s} epochs={s.finish_epoch:3d} "
          f"optimal={s.info.optimal!s:5s} solve={wall:6.2f}s finish={s.finish_time_s * 1e3:8.3f}ms "
          f"algbw={size / s.finish_time_s / 1e9:6.2f}GB/s bound_ratio={bound / s.finish_time_s:.3f} "
          f"check={'ok' if not bad else bad[0]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("suite", nargs="?", default="small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunks", type=int, default=None)
    a = ap.parse_args()
    if a.suite in ("small", "all"):
        p = SolveParams(backend="milp", time_limit_s=10, threads=a.threads)
        for name in ("dgx1", "ring8", "fc8", "mesh4x4", "torus4x4"):
            for kind in ("allgather", "broadcast"):
                for c in (1, 2):
                    run(name, kind, 1 << 30, c, p)
    if a.suite in ("ndv2x2", "all"):  # target: algbw >= 24.2 GB/s, solver < 30 s
        p = SolveParams(backend="rounds", time_limit_s=30, threads=a.threads)
        run("ndv2x2", "allgather", 10**9, a.chunks or 4, p)
    if a.suite in ("ndv2x4", "all"):  # target: algbw >= 15.8 GB/s, solver < 300 s
        p = SolveParams(backend="rounds", time_limit_s=300, threads=a.threads, epoch="slowest")
        run("ndv2x4", "allgather", 10**9, a.chunks or 4, p)


if __name__ == "__main__":
    main()
