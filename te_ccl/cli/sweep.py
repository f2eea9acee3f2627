"""``teccl sweep``: compile a whole algorithm library from a grid, locally or on Ray."""

from __future__ import annotations

import os
import time
from typing import Any

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from te_ccl.cli.common import emit_json, err_console, is_quiet, out_console, plain_progress
from te_ccl.errors import SpecError

_RESULT_FIELDS = ("name", "key", "status", "reason", "topology", "collective", "size_bytes",
                  "min_bytes", "max_bytes", "chunks", "inplace", "proto", "backend",
                  "finish_time_s", "measured_by", "bound_ratio", "format", "xml")


@click.command("sweep")
@click.argument("grid", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out_dir", required=True, metavar="DIR",
              help="Results directory (created in an existing directory; reused to resume).")
@click.option("--workers", type=int, default=None, metavar="N",
              help="Local worker processes (default: the CPUs this process may use).")
@click.option("--ray-address", metavar="ADDR",
              help="Run on a Ray cluster: auto, HOST:PORT or ray://HOST:PORT.")
@click.option("--retry-failed", is_flag=True, help="Run failed and timed-out points again.")
@click.option("--format", "fmt", type=click.Choice(["xml", "mscclpp"]), default="xml",
              show_default=True, help="What each point writes: MSCCL XML, or an MSCCL++ "
              "execution plan (docs/runtimes.md).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary on stdout.")
@click.pass_context
def sweep_cmd(ctx: click.Context, grid: str, out_dir: str, workers: int | None,
              ray_address: str | None, retry_failed: bool, fmt: str, as_json: bool) -> None:
    """Compile every point of GRID (topologies × collectives × sizes × options) into DIR.

    DIR gets one MSCCL XML per point, index.csv with every metric, and msccl/TOPOLOGY/
    (an MSCCL_ALGO_DIR with the fastest algorithm per size range); with --format mscclpp
    one MSCCL++ plan per point and mscclpp/TOPOLOGY/ likewise. Points already done
    with the same inputs and teccl version are skipped. Exit 0 if every point succeeded,
    1 if some failed.
    """
    from te_ccl.outputs import check_output_dir
    from te_ccl.sweep.driver import plan_sweep
    from te_ccl.sweep.grid import load_grid
    from te_ccl.sweep.points import expand_grid
    from te_ccl.sweep.store import ResultStore

    start = time.monotonic()
    check_output_dir(out_dir, key="--output")
    g = load_grid(grid)
    points = expand_grid(g, fmt)
    executor = _executor(workers, ray_address)
    store = ResultStore(out_dir)
    plan = plan_sweep(points, store, retry_failed=retry_failed)
    if not is_quiet():
        err_console.print(f"sweep {g.name}: {len(points)} points, {len(plan.done)} already done, "
                          f"{len(plan.todo)} to run on {executor.description}")
    try:
        outcome = _run_with_progress(plan, store, executor)
    except KeyboardInterrupt:
        err_console.print(f"interrupted: finished points are kept in {out_dir}; "
                          "rerun the same command to resume")
        raise
    info = _summary(g, out_dir, store, executor.description, outcome, time.monotonic() - start)
    if as_json:
        emit_json(info)
    else:
        out_console.print(_table(info))
    if not outcome.all_ok:
        ctx.exit(1)


def _executor(workers: int | None, ray_address: str | None) -> Any:
    from te_ccl.sweep.executors import LocalExecutor, RayExecutor

    if ray_address is not None:
        if workers is not None:
            raise SpecError("--workers is for the local executor; Ray uses the cluster's CPUs",
                            key="--workers")
        return RayExecutor(ray_address)
    return LocalExecutor(workers if workers is not None else _usable_cpus())


def _usable_cpus() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _run_with_progress(plan: Any, store: Any, executor: Any) -> Any:
    """A rich bar on a terminal; off one, a plain line per finished point (see common)."""
    from te_ccl.sweep.driver import run_sweep

    quiet, plain = is_quiet(), plain_progress()
    columns = (TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
               TextColumn("ok {task.fields[ok]} · [red]failed {task.fields[failed]}[/] · "
                          "running {task.fields[running]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    counts = {"ok": sum(r["status"] == "ok" for r in plan.done.values())}
    counts["failed"] = len(plan.done) - counts["ok"]
    left = len(plan.todo)
    with Progress(*columns, console=err_console, disable=quiet or plain) as progress:
        task = progress.add_task("sweep", total=len(plan.points), completed=len(plan.done),
                                 running=min(executor.capacity, left), **counts)

        def on_record(record: dict[str, Any]) -> None:
            nonlocal left
            left -= 1
            counts["ok" if record["status"] == "ok" else "failed"] += 1
            progress.update(task, advance=1, running=min(executor.capacity, left), **counts)
            if plain:
                done = len(plan.points) - left
                err_console.print(f"sweep {done}/{len(plan.points)} (ok {counts['ok']}, failed "
                                  f"{counts['failed']}): {record['name']} {record['status']}",
                                  markup=False, highlight=False)
            if record["status"] != "ok" and not quiet:
                progress.console.print(f"[red]{record['status']}[/] {record['name']}: "
                                       f"{record['reason']}")

        return run_sweep(plan, store, executor, on_record=on_record)


def _summary(g: Any, out_dir: str, store: Any, executor: str, outcome: Any,
             wall_s: float) -> dict[str, Any]:
    records = [outcome.records.get(p.key, {"name": p.name, "key": p.key, "status": "pending"})
               for p in outcome.points]
    msccl = sorted({str(store.msccl_dir(p.topology.name, p.fmt)) for p in outcome.points})
    return {
        "grid": g.file, "name": g.name, "output": out_dir, "executor": executor,
        "points": len(outcome.points), "skipped": outcome.skipped,
        "ok": outcome.counts["ok"], "failed": outcome.counts["failed"],
        "timeout": outcome.counts["timeout"], "index": str(outcome.index),
        "msccl_dirs": msccl, "wall_time_s": round(wall_s, 3),
        "results": [{k: r.get(k) for k in _RESULT_FIELDS} for r in records],
    }


def _table(info: dict[str, Any]) -> Table:
    """Counts in the title, one row per point that did not succeed (the ones to look at)."""
    t = Table(title=f"sweep {info['name']}: {info['ok']}/{info['points']} ok, "
                    f"{info['failed']} failed, {info['timeout']} timed out "
                    f"({info['skipped']} already done)")
    for col in ("point", "status", "reason"):
        t.add_column(col)
    for r in info["results"]:
        if r["status"] != "ok":
            t.add_row(r["name"], f"[red]{r['status']}[/]", r.get("reason") or "")
    t.caption = f"index: {info['index']}; algorithms: {', '.join(info['msccl_dirs'])}"
    return t
