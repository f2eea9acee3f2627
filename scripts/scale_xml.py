"""The scale instances at the XML end: solve, lower and verify each.

For every instance (AllGather, ReduceScatter and AllReduce of 1 GiB on the 8×8 to 32×32
meshes and tori and the 8×8×8 torus, AlltoAll on rail8x8) this solves with
``te_ccl.solve`` (backend auto), lowers with ``lower_to_msccl``, writes the XML to a
temporary directory, runs ``te_ccl.verify.msccl.verify_msccl`` on the file and replays
it as the runtime runs it (``te_ccl.simulate.msccl.simulate_msccl``). Lowering,
verification and replay each run in their own process, one at a time, so that peak
memory is measured per stage and a slow stage can be cut by its timeout without losing
the numbers before it. Columns: GPUs, transfers, lowering seconds (wall, and CPU:
``lower_cpu_s`` is what the lowering costs on an idle core), XML MB, peak RSS of the
solve + lower process (``lower_rss_mb``), verification seconds, verdict (with the first
finding), peak RSS of the verification (``verify_rss_mb``), the replay's finish over the
collective's lower bound (``xml_ratio``) and the replay's seconds (``replay_s``)::

    python scripts/scale_xml.py [--only NAME …] [--json] [--keep DIR]
    python scripts/scale_xml.py --list
    python scripts/scale_xml.py --table bench/scale_xml.json   # markdown of a saved run

NAME is ``topology`` (every collective on it) or ``topology:kind``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GiB = 1 << 30
TOPOLOGIES = ("mesh8x8", "torus8x8", "mesh16x16", "torus16x16", "torus8x8x8", "mesh32x32",
              "torus32x32")
INSTANCES = [f"{t}:{k}" for k in ("allgather", "reducescatter", "allreduce")
             for t in TOPOLOGIES] + ["rail8x8:alltoall"]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def lower_one(name: str, out: Path, time_limit: float) -> dict:
    """Solve and lower one instance, write its XML to ``out``; the numbers as a dict."""
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.lower.msccl import lower_to_msccl
    from te_ccl.solve import SolveParams, solve
    from te_ccl.spec.topology import load_topology

    topology, kind = name.split(":")
    topo = load_topology(topology)
    coll = Collective(CollectiveKind(kind), GiB, tuple(range(topo.ngpus)))
    t0 = time.monotonic()
    schedule = solve(topo, coll, SolveParams(time_limit_s=time_limit, threads=1))
    solve_s = time.monotonic() - t0
    t0, cpu0 = time.monotonic(), time.process_time()
    xml = lower_to_msccl(schedule)
    lower_s, lower_cpu_s = time.monotonic() - t0, time.process_time() - cpu0
    out.write_bytes(xml)
    return {"gpus": topo.ngpus, "transfers": len(schedule.transfers),
            "chunks_per_rank": schedule.collective.chunks_per_rank,
            "solve_s": round(solve_s, 2), "lower_s": round(lower_s, 2),
            "lower_cpu_s": round(lower_cpu_s, 2),
            "xml_mb": round(len(xml) / 1e6, 1), "lower_rss_mb": round(_peak_mb()),
            "root": schedule.collective.root}


def replay_one(path: Path, name: str) -> dict:
    """Replay one written XML file on its topology; its finish over the lower bound."""
    from te_ccl.bounds import lower_bound
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.simulate.msccl import simulate_msccl
    from te_ccl.spec.topology import load_topology

    topology, kind = name.split(":")
    topo = load_topology(topology)
    t0 = time.monotonic()
    finish = simulate_msccl(path, topo, GiB, intervals=False).finish_time_s
    replay_s = time.monotonic() - t0
    bound = lower_bound(topo, Collective(CollectiveKind(kind), GiB, tuple(range(topo.ngpus))))
    return {"xml_s": finish, "xml_ratio": round(finish / bound.seconds, 4),
            "replay_s": round(replay_s, 2), "replay_rss_mb": round(_peak_mb())}


def verify_one(path: Path, root: int | None) -> dict:
    """Verify one written XML file; the verdict, a few findings and the time."""
    from te_ccl.verify.msccl import verify_msccl

    t0 = time.monotonic()
    report = verify_msccl(path, root=root)
    return {"verify_s": round(time.monotonic() - t0, 2),
            "verdict": "valid" if report.valid else "invalid",
            "findings": [f"{f.rule}: {f.message}" for f in report.errors][:3],
            "verify_rss_mb": round(_peak_mb())}


def _child(args: list[str], timeout: float) -> dict:
    """Run this script on one stage in a fresh process; its last stdout line is JSON."""
    try:
        done = subprocess.run([sys.executable, __file__, *args], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:g} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(name: str, workdir: Path, args: argparse.Namespace) -> dict:
    """Lower then verify one instance, each in its own process."""
    xml = workdir / f"{name.replace(':', '_')}.xml"
    row = {"instance": name, **_child(["--lower", name, str(xml), str(args.time_limit)],
                                       args.lower_timeout)}
    if "error" in row:
        row["verdict"] = "not lowered"
        return row
    root = "none" if row.get("root") is None else str(row["root"])
    verdict = _child(["--verify", str(xml), root], args.verify_timeout)
    if "error" in verdict:
        verdict = {"verdict": f"not verified ({verdict['error']})"}
    replay = _child(["--replay", str(xml), name], args.verify_timeout)
    if "error" in replay:
        replay = {"xml_ratio": f"not replayed ({replay['error']})"}
    return {**row, **verdict, **replay}


COLUMNS = ("instance", "gpus", "chunks_per_rank", "transfers", "lower_s", "lower_cpu_s",
           "xml_mb", "lower_rss_mb", "verify_s", "verdict", "verify_rss_mb", "xml_ratio",
           "replay_s")


def _header() -> str:
    return "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)


def _line(row: dict) -> str:
    cells = [str(row.get(c, "")) for c in COLUMNS]
    if row.get("findings"):
        cells[COLUMNS.index("verdict")] += f" ({row['findings'][0]})"
    if row.get("error"):
        cells[COLUMNS.index("verdict")] += f" ({row['error']})"
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", metavar="NAME", help="topology or topology:kind")
    ap.add_argument("--list", action="store_true", help="print the instance names and exit")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    ap.add_argument("--keep", metavar="DIR", help="write the XML files here and keep them")
    ap.add_argument("--time-limit", type=float, default=120.0, help="solver time limit (s)")
    ap.add_argument("--lower-timeout", type=float, default=3600.0,
                    help="seconds for solve + lower of one instance")
    ap.add_argument("--verify-timeout", type=float, default=3600.0,
                    help="seconds for the verification (and for the replay) of one instance")
    ap.add_argument("--table", metavar="FILE", help="print a saved --json run as markdown")
    ap.add_argument("--lower", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--verify", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--replay", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.lower:
        print(json.dumps(lower_one(args.lower[0], Path(args.lower[1]), float(args.lower[2]))))
        return
    if args.table:
        print(_header())
        print("\n".join(_line(row) for row in json.loads(Path(args.table).read_text())))
        return
    if args.replay:
        print(json.dumps(replay_one(Path(args.replay[0]), args.replay[1])))
        return
    if args.verify:
        root = None if args.verify[1] == "none" else int(args.verify[1])
        print(json.dumps(verify_one(Path(args.verify[0]), root)))
        return
    names = [n for n in INSTANCES
             if not args.only or n in args.only or n.split(":")[0] in args.only]
    if args.list:
        print("\n".join(names))
        return
    with tempfile.TemporaryDirectory(prefix="scale_xml_") as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if not args.json:
            print(_header(), flush=True)
        rows = []
        for name in names:
            rows.append(run(name, workdir, args))
            if not args.json:
                print(_line(rows[-1]), flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
