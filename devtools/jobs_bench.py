"""``python -m devtools.jobs_bench``: several jobs on one network, compiled jointly.

Two and four jobs on ndv2x4, dgx2x2 and the 256-GPU torus16x16, once on GPUs whose
links they share (overlapping communicators) and once apart, and on dgx2x2 two jobs on
disjoint halves of both boxes (the shared cluster's usual placement). A job runs on its
own GPUs and these boxes' NICs hang off GPUs, so jobs on disjoint GPUs share no link of
these networks: the shared rows are communicators on common GPUs. Each row is
``teccl compile TOPOLOGY --jobs`` (:func:`te_ccl.jobs.compile_jobs`, objective
``weighted``): the joint files replayed together against the jobs compiled alone and
replayed together. The jobs compiled alone are the bench's own, not the joint compile's
(which compiles them in its shares of the row's limit, so which files it has depends on
the load): each job by ``teccl compile`` on the whole network at :data:`ALONE_LIMIT_S`,
its file kept per code (:func:`_alone_files`) so that every run of one commit replays
the same files. Targets: where links are shared, joint ≤ :data:`SHARED_GOAL` × that;
where none is, equal. Each row also gives the joint objective's lower bound
(:func:`te_ccl.jobs.bound.joint_bound`): where it is above the goal, the goal is out of
reach for any files. Prints a markdown table (or ``--json``: ``{"header": …, "rows": […]}``,
the header saying the run's commit, load and command, :mod:`devtools.provenance`;
``--table FILE`` renders a stored ``--json``) on stdout; exits 1 when a target is short,
unless ``--no-fail``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from devtools import provenance
from te_ccl.compiler import forward_only
from te_ccl.deadline import cpu_s
from te_ccl.errors import RuntimeLimitError, SolverError
from te_ccl.jobs import compile_jobs
from te_ccl.jobs.files import checked_algo, replay_together
from te_ccl.jobs.spec import JobSet, jobs_from, objective_of
from te_ccl.spec.topology import load_topology
from te_ccl.verify.msccl.model import Algo

__all__ = ["SCENARIOS", "SHARED_GOAL", "run_scenario", "main"]

SHARED_GOAL = 0.85
LIMIT_S_PER_JOB = 20.0  # a row's --time-limit per job: where the jobs' routes meet
#                        between GPUs each job's first compile gets about 4 s of it (a
#                        fifth: alone, three views and mix; flow does not fit these rows);
#                        where the files then share no link (dgx2x2 across boxes) each is
#                        compiled again in the time left; rows whose routes meet nowhere
#                        give it all 20 s (only alone runs)
SIZE = "64MB"
ALONE_LIMIT_S = 120.0  # each job compiled alone for the baseline: one limit whatever the
#                        row's (twice teccl compile's default; the files are kept per code)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "teccl" / "jobs-alone"


@dataclass(frozen=True)
class Scenario:
    topology: str
    name: str
    jobs: tuple[dict[str, Any], ...]


def _job(name: str, ranks: list[str], kind: str, weight: float = 1) -> dict[str, Any]:
    return {"name": name, "ranks": ranks, "collective": kind, "size": SIZE, "weight": weight}


def _box(prefix: str, gpus: range) -> list[str]:
    return [f"{prefix}.g{i}" for i in gpus]


def _block(rows: range, cols: range, width: int = 16) -> list[str]:
    """torus16x16 GPUs (row-major ranks) of a block, as ranks."""
    return [str(r * width + c) for r in rows for c in cols]


def _scenarios() -> tuple[Scenario, ...]:
    nd = [_box(f"b{b}", range(8)) for b in range(4)]
    dg = [_box(f"b{b}", range(16)) for b in range(2)]
    return (
        Scenario("ndv2x4", "2 jobs, shared", (
            _job("all", sum(nd, []), "allgather"),
            _job("pair", nd[0] + nd[1], "allreduce", 2))),
        Scenario("ndv2x4", "2 jobs, apart", (
            _job("left", nd[0] + nd[1], "allgather"),
            _job("right", nd[2] + nd[3], "allreduce", 2))),
        Scenario("ndv2x4", "4 jobs, shared", (
            _job("all", sum(nd, []), "allgather"),
            _job("box0", nd[0], "allreduce", 2),
            _job("box1", nd[1], "allgather"),
            _job("pair", nd[2] + nd[3], "allgather", 2))),
        Scenario("ndv2x4", "4 jobs, apart", tuple(
            _job(f"box{b}", nd[b], "allgather" if b % 2 else "allreduce", 1 + b % 2)
            for b in range(4))),
        Scenario("dgx2x2", "2 jobs, shared", (
            _job("all", dg[0] + dg[1], "allgather"),
            _job("half", dg[0][:8] + dg[1][:8], "allgather", 2))),
        Scenario("dgx2x2", "2 jobs, apart", (
            _job("box0", dg[0], "allgather"),
            _job("box1", dg[1], "allreduce", 2))),
        Scenario("dgx2x2", "2 jobs across boxes, apart", (
            _job("low", dg[0][:8] + dg[1][:8], "allgather"),
            _job("high", dg[0][8:] + dg[1][8:], "allgather", 2))),
        Scenario("dgx2x2", "4 jobs, shared", (
            _job("all", dg[0] + dg[1], "allgather"),
            _job("half", dg[0][:8] + dg[1][:8], "allgather", 2),
            _job("box0", dg[0], "allreduce"),
            _job("box1", dg[1], "allgather", 2))),
        Scenario("dgx2x2", "4 jobs, apart", tuple(
            _job(f"q{i}", dg[i // 2][(i % 2) * 8:(i % 2) * 8 + 8],
                 "allgather" if i % 2 else "allreduce", 1 + i % 2) for i in range(4))),
        Scenario("torus16x16", "2 jobs, shared", (
            _job("wide", _block(range(4), range(8)), "allgather"),
            _job("corner", _block(range(4), range(4)), "allreduce", 2))),
        Scenario("torus16x16", "2 jobs, apart", (
            _job("west", _block(range(4), range(4)), "allgather"),
            _job("east", _block(range(4), range(8, 12)), "allreduce", 2))),
        Scenario("torus16x16", "4 jobs, shared", (
            _job("wide", _block(range(4), range(8)), "allgather"),
            _job("corner", _block(range(4), range(4)), "allreduce", 2),
            _job("tall", _block(range(8), range(4)), "allgather"),
            _job("middle", _block(range(2, 6), range(2, 6)), "allgather", 2))),
        Scenario("torus16x16", "4 jobs, apart", tuple(
            _job(f"block{i}", _block(range(4 * (i // 2), 4 * (i // 2) + 4),
                                     range(4 * (i % 2), 4 * (i % 2) + 4)),
                 "allgather" if i % 2 else "allreduce", 1 + i % 2) for i in range(4))),
    )


SCENARIOS = _scenarios()


def run_scenario(s: Scenario, limit_s: float | None = None, cache: Path | None = CACHE
                 ) -> dict[str, Any]:
    """One row: the joint compile's objective against the jobs compiled alone
    (``limit_s``: its --time-limit, by default :data:`LIMIT_S_PER_JOB` per job; ``cache``:
    where the files alone are kept, :func:`_alone_files`). Its seconds are the joint
    compile's. A compile that ends as ``teccl compile`` exits 3 (no file in its limit, or
    none the runtime holds) is the row's answer, not the run's end: the row names it under
    ``exit_3`` and has no ratio, so its target is not met."""
    topo = load_topology(s.topology)
    jobs = jobs_from(topo, {"jobs": [dict(j) for j in s.jobs]}, None)
    started, cpu = time.monotonic(), cpu_s()
    limit = limit_s if limit_s is not None else LIMIT_S_PER_JOB * len(s.jobs)
    row: dict[str, Any] = {"topology": s.topology, "scenario": s.name, "jobs": len(s.jobs)}
    exit_3: dict[str, str] = {}
    try:
        info = compile_jobs(jobs, None, objective="weighted", time_limit_s=limit).as_dict()
    except (SolverError, RuntimeLimitError) as e:
        info, exit_3["joint"] = None, str(e)
    elapsed, spent = round(time.monotonic() - started, 2), round(cpu_s() - cpu, 2)
    try:
        finish = replay_together(jobs, _alone_files(jobs, s.topology, cache)).finish_s
    except (SolverError, RuntimeLimitError) as e:
        finish, exit_3["alone"] = None, str(e)
    if info is None or finish is None:
        return row | {"shared_links": None if info is None else info["shared_links"],
                      "method": "exit 3", "joint_s": None, "together_s": None,
                      "ratio": None, "goal": None, "met": False, "exit_3": exit_3,
                      "elapsed_s": elapsed, "cpu_s": spent}
    together = objective_of("weighted", [(j.weight, finish[j.name]) for j in jobs.jobs])
    ratio = info["joint"] / together
    shared = info["shared_links"] > 0
    met = ratio <= SHARED_GOAL if shared else abs(ratio - 1) < 1e-9
    return row | {
        "shared_links": info["shared_links"], "method": info["method"],
        "joint_s": info["joint"], "together_s": together,
        "compile_together_s": info["together"], "alone_s": info["alone"],
        "ratio": ratio, "bound_s": info["bound"], "bound_resource": info["bound_resource"],
        "goal": f"<= {SHARED_GOAL}" if shared else "= 1",
        "met": met, "checks": info["checks"], "candidates": info["candidates"],
        "notes": info["notes"], "elapsed_s": elapsed, "cpu_s": spent,
        "per_job": [{k: j[k] for k in ("name", "weight", "joint_s", "alone_s")}
                    | {"together_s": finish[j["name"]], "compile_together_s": j["together_s"]}
                    for j in info["jobs"]]}


def _alone_files(jobs: JobSet, topology: str, cache: Path | None) -> dict[str, Algo]:
    """Each job's file compiled alone (``teccl compile`` on the whole network, its
    switches forwarding, at :data:`ALONE_LIMIT_S`), read and verified for the job. Kept
    in ``cache`` under the code's key (:func:`_code`) and the job's collective: a rerun
    of one code replays the same files (a compile's search is cut by the wall clock, so
    on a busy machine two compiles may keep different files); None, or code with no key,
    keeps nothing. The compile writes each file whole (:mod:`te_ccl.outputs`), so a run
    cut short leaves no partial file in the cache."""
    import te_ccl

    code = _code() if cache is not None else None
    algos = {}
    with tempfile.TemporaryDirectory(prefix="teccl-jobs-alone-") as tmp:
        folder = cache / code if cache is not None and code is not None else Path(tmp)
        for job in jobs.jobs:
            name = hashlib.sha256(f"{topology} {job.collective!r}".encode()).hexdigest()[:16]
            path = folder / f"{name}.xml"
            if not path.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                te_ccl.compile(forward_only(jobs.topology), job.collective, output=str(path),
                               fmt="xml", time_limit_s=ALONE_LIMIT_S)
            algos[job.name] = checked_algo(job, path.read_bytes())
    return algos


def _code() -> str | None:
    """The code's key: the commit and, where te_ccl/ has changes not committed (edited
    or new files), a digest of them; None outside a git checkout, where no key tells
    one code from another."""
    commit = provenance.commit()
    head = commit.rstrip("+")
    if not head:
        return None
    git = ["git", "-C", str(provenance.ROOT)]
    digest = hashlib.sha256(subprocess.run([*git, "diff", "HEAD", "--", "te_ccl"],
                                           capture_output=True, check=True).stdout)
    new = subprocess.run([*git, "ls-files", "-z", "--others", "--exclude-standard", "--",
                          "te_ccl"], capture_output=True, check=True).stdout
    for name in sorted(filter(None, new.split(b"\0"))):
        digest.update(name + b"\0" + (provenance.ROOT / name.decode()).read_bytes())
    return head + (f"-{digest.hexdigest()[:12]}" if commit.endswith("+") else "")


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| topology | jobs | shared links | kept | joint (weighted) | compiled alone, "
             "run together | ratio | goal | met | lower bound | bound / together | "
             "the joint compile's files alone, run together |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("exit_3"):  # no file in its limit: what ended so, no ratio
            why = "; ".join(f"{k}: {v}" for k, v in r["exit_3"].items())
            links = "-" if r["shared_links"] is None else r["shared_links"]
            lines.append(f"| {r['topology']} | {r['scenario']} | {links} | exit 3 ({why}) "
                         "| - | - | - | - | no | - | - | - |")
            continue
        bound = r.get("bound_s")
        tail = "- | -" if bound is None else \
            f"{bound * 1e3:.3f} ms | {bound / r['together_s']:.3f}"
        lines.append(f"| {r['topology']} | {r['scenario']} | {r['shared_links']} | {r['method']} "
                     f"| {r['joint_s'] * 1e3:.3f} ms | {r['together_s'] * 1e3:.3f} ms "
                     f"| {r['ratio']:.3f} | {r['goal']} | {'yes' if r['met'] else 'no'} | {tail} "
                     f"| {_ms(r.get('compile_together_s'))} |")
    return "\n".join(lines) + "\n"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


@click.command("jobs_bench")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--no-fail", is_flag=True, help="Exit 0 even if a target is short.")
@click.option("--only", metavar="TOPOLOGY",
              type=click.Choice(sorted({s.topology for s in SCENARIOS})),
              help="Run the rows of one topology.")
@click.option("--scenario", metavar="NAME", type=click.Choice(sorted({s.name for s in SCENARIOS})),
              help="Run the rows of this name (e.g. '2 jobs, shared').")
@click.option("--limit-per-job", type=click.FloatRange(min=0, min_open=True),
              default=LIMIT_S_PER_JOB, show_default=True,
              help="A row's --time-limit per job, in seconds.")
@click.option("--alone-cache", metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
              default=CACHE, show_default=True,
              help="Where the jobs' files compiled alone are kept, per commit.")
@click.option("--no-alone-cache", is_flag=True,
              help="Compile every job alone again, keeping nothing.")
@click.option("--table", metavar="FILE", type=click.Path(exists=True, dir_okay=False),
              help="Print the markdown table of FILE (a --json output) instead of running.")
def jobs_bench_cmd(as_json: bool, no_fail: bool, only: str | None, scenario: str | None,
                   limit_per_job: float, alone_cache: Path, no_alone_cache: bool,
                   table: str | None) -> None:
    """Run the jobs rows and judge their targets."""
    import json

    if table is not None:
        try:
            saved = json.loads(Path(table).read_text())
        except ValueError as e:
            raise click.BadParameter(f"{table}: not the JSON of --json ({e})",
                                     param_hint="--table") from None
        # a run saved before runs had a header is the bare list of rows
        header, rows = (saved.get("header"), saved.get("rows", [])) \
            if isinstance(saved, dict) else (None, saved)
        click.echo(provenance.line(header) + "\n\n" + markdown(rows), nl=False)
        return
    header = provenance.start()
    cache = None if no_alone_cache else alone_cache
    rows = [run_scenario(s, limit_per_job * len(s.jobs), cache) for s in SCENARIOS
            if only in (None, s.topology) and scenario in (None, s.name)]
    if as_json:
        click.echo(json.dumps({"header": provenance.finish(header), "rows": rows}, indent=2))
    else:
        click.echo(markdown(rows))
    if not no_fail and not all(r["met"] for r in rows):
        sys.exit(1)


def main() -> None:
    jobs_bench_cmd(prog_name="python -m devtools.jobs_bench")


if __name__ == "__main__":
    main()
