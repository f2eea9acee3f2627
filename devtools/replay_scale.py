"""Time the XML replay (``te_ccl.simulate.msccl``) on large files, stage by stage.

For each FILE: reading it (``read_msccl``, the verifier's reader), building the replay's
flat lists, and the event loop, in CPU seconds, the finish time, the ratio to the lower
bound and the peak RSS of the process. Each file runs in its own process so that peak
memory is per file::

    teccl compile mesh32x32 -c allgather -s 1GiB -o /tmp/ag.xml
    python -m devtools.replay_scale /tmp/ag.xml [--topology mesh32x32] [--size 1GiB] [--proto LL]

Topology and size default to the ones the file names (its teccl comment).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def replay_one(path: str, topology: str | None, size: str | None, proto: str | None) -> dict:
    from te_ccl.bounds import lower_bound
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.simulate import msccl
    from te_ccl.spec.topology import load_topology
    from te_ccl.units import parse_size
    from te_ccl.verify.msccl.reader import paused_gc, read_msccl

    made = msccl.read_provenance(path)
    if made is None and not (topology and size):
        raise SystemExit(f"{path}: no teccl comment: pass --topology and --size")
    topo = load_topology(topology or made[0])
    nbytes = parse_size(size) if size else made[1]
    clock = time.process_time
    with paused_gc():
        t0 = clock()
        algo = read_msccl(path)
        t1 = clock()
        flat = msccl.Flat(algo, topo, range(topo.ngpus), proto or algo.proto)
        t2 = clock()
        sim = msccl.replay(flat, nbytes / algo.nchunksperloop, False)[0]
        t3 = clock()
    bound = lower_bound(topo, Collective(CollectiveKind(algo.coll), nbytes,
                                         tuple(range(topo.ngpus)))).seconds
    return {"file": path, "gpus": topo.ngpus, "steps": flat.nsteps, "proto": proto or algo.proto,
            "read_cpu_s": round(t1 - t0, 2),
            "build_cpu_s": round(t2 - t1, 2), "replay_cpu_s": round(t3 - t2, 2),
            "finish_s": sim.finish_time_s, "bound_ratio": round(sim.finish_time_s / bound, 4),
            "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--topology")
    ap.add_argument("--size")
    ap.add_argument("--proto", help="replay under this protocol's slots (default: the file's)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(replay_one(args.files[0], args.topology, args.size, args.proto)))
        return
    for f in args.files:
        extra = [x for k, v in (("--topology", args.topology), ("--size", args.size),
                                ("--proto", args.proto)) if v for x in (k, v)]
        proc = subprocess.run([sys.executable, "-m", "devtools.replay_scale", "--one", f, *extra],
                              capture_output=True, text=True)
        print(proc.stdout.strip() or proc.stderr.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
