"""Measure the scale-backend targets on the 64-1024-GPU instances: solver time, finish / bound, checker.

Each instance runs in its own process (isolated peak memory, a hard timeout), one at a
time: ``python -m devtools.scale_targets [--only NAME…] [--check-max N] [--json FILE]``.

The bound: :func:`te_ccl.bounds.lower_bound` (exact cut by min-cuts, max-concurrent-flow
LP) up to 64 GPUs and for AlltoAll; above that, where the min-cut rounds take minutes,
the single-node cut ``(N−1)·(M/N) / B_in(v)`` (``B_out`` for ReduceScatter, their sum for
AllReduce), which equals the exact cut bound on meshes and tori with uniform links
(checked on 8×8 and 16×16), and never less than the α-diameter.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

GiB = 1 << 30
# (topology, kind, solver-time target s, ratio target)
AG_TARGETS = [("mesh8x8", 5, 1.01), ("torus8x8", 5, 1.01), ("mesh16x16", 20, 1.01),
              ("torus16x16", 20, 1.01), ("torus8x8x8", 60, 1.02), ("mesh32x32", 60, 1.02),
              ("torus32x32", 60, 1.02)]
INSTANCES = [(t, k, s, r) for k in ("allgather", "reducescatter", "allreduce")
             for t, s, r in AG_TARGETS] + [("rail8x8", "alltoall", 60, 1.05)]


def _node_cut(topo, coll) -> float:
    from te_ccl.collective.model import CollectiveKind as K

    n, per = coll.nranks, coll.size_bytes / coll.nranks

    def cut(incoming: bool) -> float:
        links = topo.in_links if incoming else topo.out_links
        return max((n - 1) * per / sum(x.bandwidth_Bps for x in links(g)) for g in topo.gpus)

    if coll.kind is K.ALLREDUCE:
        return cut(True) + cut(False)
    return cut(coll.kind is not K.REDUCESCATTER)


def _bound(topo, coll) -> tuple[float, str]:
    from te_ccl.bounds import lower_bound
    from te_ccl.collective.model import CollectiveKind as K

    if topo.ngpus <= 64 or coll.kind is K.ALLTOALL:
        return lower_bound(topo, coll).seconds, "exact"
    import networkx as nx

    hops = max(nx.single_source_shortest_path_length(topo.graph(), topo.gpus[0]).values())
    alpha = hops * min(x.latency_s for x in topo.links)
    return max(_node_cut(topo, coll), alpha), "node-cut"


def run_one(topology: str, kind: str, check_max: int) -> dict:
    from te_ccl.backends.base import SolveParams
    from te_ccl.backends.scale import compile_scale
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.spec.topology import load_topology
    from te_ccl.verify.schedule_check import check_schedule

    topo = load_topology(topology)
    coll = Collective(CollectiveKind(kind), GiB, tuple(range(topo.ngpus)))
    t0 = time.monotonic()
    s = compile_scale(topo, coll, SolveParams(time_limit_s=120, threads=2))
    solve_s = time.monotonic() - t0
    rss_solve = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    bound, how = _bound(topo, coll)
    out = {"topology": topology, "kind": kind, "ngpus": topo.ngpus, "solver_s": solve_s,
           "finish_s": s.finish_time_s, "bound_s": bound, "bound": how,
           "ratio": s.finish_time_s / bound, "transfers": len(s.transfers),
           "subchunks": s.collective.chunks_per_rank, "rss_mb": rss_solve,
           "method": s.info.status.split(":")[0],
           "check": None}
    if len(s.transfers) <= check_max:
        t0 = time.monotonic()
        out["check"] = len(check_schedule(s))
        out["check_s"] = time.monotonic() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="topology or topology:kind names to run")
    ap.add_argument("--check-max", type=int, default=2_000_000,
                    help="run the schedule checker only up to this many transfers")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--one", nargs=2, metavar=("TOPOLOGY", "KIND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(*args.one, args.check_max)))
        return
    rows = []
    print("| instance | GPUs | method | sub-chunks | solver s (target) | finish/bound (target) "
          "| bound | checker | peak MB |\n|---|---|---|---|---|---|---|---|---|", flush=True)
    for topo, kind, t_target, r_target in INSTANCES:
        if args.only and topo not in args.only and f"{topo}:{kind}" not in args.only:
            continue
        cmd = [sys.executable, "-m", "devtools.scale_targets", "--one", topo, kind, "--check-max", str(args.check_max)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            row = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 \
                else {"error": done.stderr.strip().splitlines()[-1:]}
        except subprocess.TimeoutExpired:
            row = {"error": f"timeout {args.timeout:g} s"}
        row.update(topology=topo, kind=kind, time_target=t_target, ratio_target=r_target)
        rows.append(row)
        print(_line(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def _line(r: dict) -> str:
    name = f"{r['topology']} {r['kind']}"
    if "error" in r:
        return f"| {name} | | | | | | | error: {r['error']} | |"
    ok_t = "✓" if r["solver_s"] <= r["time_target"] else "✗"
    ok_r = "✓" if r["ratio"] <= r["ratio_target"] else "✗"
    check = "skipped" if r["check"] is None else (
        f"pass ({r['check_s']:.0f} s)" if r["check"] == 0 else f"{r['check']} violations")
    return (f"| {name} | {r['ngpus']} | {r['method']} | {r['subchunks']} | "
            f"{r['solver_s']:.2f} ({r['time_target']}) {ok_t} | {r['ratio']:.4f} "
            f"({r['ratio_target']}) {ok_r} | {r['bound']} | {check} | {r['rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
