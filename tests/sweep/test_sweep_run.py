"""End-to-end sweeps: results directory, resume, failures recorded, timeouts, Ctrl-C."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from lxml import etree

from te_ccl import compiler
from te_ccl.cli.main import cli
from te_ccl.errors import SpecError
from te_ccl.sweep import run as run_mod
from te_ccl.sweep.driver import plan_sweep, run_sweep
from te_ccl.sweep.executors import LocalExecutor, import_ray
from te_ccl.sweep.grid import load_grid
from te_ccl.sweep.points import expand_grid
from te_ccl.sweep.run import run_point
from te_ccl.sweep.store import COLUMNS, ResultStore


def sweep(*args: str):
    result = CliRunner().invoke(cli, ["sweep", *args, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def read_index(out) -> list[dict[str, str]]:
    import csv

    with open(out / "index.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_sweep_writes_an_msccl_directory_index_and_records(two_ok, tmp_path):
    out = tmp_path / "out"
    code, info = sweep(two_ok, "-o", str(out), "--workers", "2")
    assert code == 0
    assert (info["points"], info["ok"], info["failed"], info["skipped"]) == (2, 2, 0, 0)
    rows = read_index(out)
    assert list(rows[0]) == list(COLUMNS)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for r in rows:
        algo = etree.parse(str(out / r["xml"])).getroot()
        assert (algo.get("minBytes"), algo.get("maxBytes")) == ("0", "63999")  # 64KB = 64000, half-open
        assert algo.get("name") == r["name"]
        assert r["measured_by"] == "xml replay" and float(r["finish_time_s"]) > 0
        assert float(r["schedule_replay_s"]) > 0 and float(r["predicted_s"]) > 0
    # one group (same collective and size range): exactly one algorithm is published
    (published,) = (out / "msccl" / "ring8").glob("*.xml")
    (winner,) = [r for r in rows if r["selected"] == "True"]
    assert published.name == winner["name"] + ".xml"
    assert float(winner["finish_time_s"]) == min(float(r["finish_time_s"]) for r in rows)
    assert published.read_bytes() == (out / winner["xml"]).read_bytes()


@pytest.mark.slow
def test_resume_skips_done_points_and_reruns_missing_or_damaged_ones(two_ok, tmp_path):
    grid, out = two_ok, tmp_path / "out"
    assert sweep(grid, "-o", str(out), "--workers", "1")[0] == 0
    records = sorted((out / "records").glob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in records]
    code, info = sweep(grid, "-o", str(out), "--workers", "1")
    assert (code, info["skipped"], info["ok"]) == (0, 2, 2)
    assert [p.stat().st_mtime_ns for p in records] == stamps
    # a damaged XML makes its point run again; the other is still skipped
    damaged = out / info["results"][0]["xml"]
    damaged.write_bytes(b"<algo")
    code, info = sweep(grid, "-o", str(out), "--workers", "1")
    assert (code, info["skipped"], info["ok"]) == (0, 1, 2)
    assert damaged.read_bytes().startswith(b"<algo name=")


def test_failed_point_is_recorded_and_the_sweep_goes_on(one_ok_one_failed, tmp_path):
    grid, out = one_ok_one_failed, tmp_path / "out"
    code, info = sweep(grid, "-o", str(out), "--workers", "2")
    assert (code, info["ok"], info["failed"]) == (1, 1, 1)
    failed = next(r for r in info["results"] if r["status"] == "failed")
    assert "SolverError" in failed["reason"] and "horizon" in failed["reason"]
    assert failed["xml"] is None
    # failures count as done (they are deterministic) unless --retry-failed
    code, info = sweep(grid, "-o", str(out), "--workers", "1")
    assert (code, info["skipped"]) == (1, 2)
    result = CliRunner().invoke(cli, ["sweep", grid, "-o", str(out), "--workers", "1",
                                      "--retry-failed", "--json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["skipped"] == 1


def test_subprocess_json_on_stdout_and_exit_1(one_ok_one_failed, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", "from te_ccl.cli.main import main; main()", "sweep",
         one_ok_one_failed, "-o", str(out), "--workers", "2", "--json"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 1, proc.stderr
    info = json.loads(proc.stdout)
    assert sorted(r["status"] for r in info["results"]) == ["failed", "ok"]
    assert len(read_index(out)) == 2


def test_point_over_its_hard_limit_is_a_timeout(two_ok, monkeypatch):
    point = expand_grid(load_grid(two_ok))[0]
    monkeypatch.setattr(run_mod, "hard_limit_s", lambda p: 0.2)
    finished = []

    def overrun(*args):
        time.sleep(5)
        finished.append(args)

    monkeypatch.setattr(compiler, "compile_collective", overrun)  # what a point runs
    result = run_point(point)
    assert result.record["status"] == "timeout" and result.data is None
    assert not finished and result.record["wall_time_s"] is not None  # stopped, not waited for


def test_a_bug_in_one_point_becomes_a_failed_record(two_ok, monkeypatch):
    point = expand_grid(load_grid(two_ok))[0]

    def boom(*args):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(compiler, "compile_collective", boom)
    record = run_point(point).record
    assert record["status"] == "failed"
    assert record["reason"] == "internal error: ZeroDivisionError: oops"


class InterruptedExecutor:
    """Runs the first point in-process, then behaves as if Ctrl-C was pressed."""

    capacity, description = 1, "test"

    def run(self, points):
        yield points[0], run_point(points[0])
        raise KeyboardInterrupt


def test_ctrl_c_keeps_completed_points_and_resume_runs_only_the_rest(two_ok, tmp_path):
    points = expand_grid(load_grid(two_ok))
    store = ResultStore(tmp_path / "out")
    first_plan = plan_sweep(points, store)
    ran, left = first_plan.todo
    with pytest.raises(KeyboardInterrupt):
        run_sweep(first_plan, store, InterruptedExecutor())
    status = {r["key"]: r["status"] for r in read_index(tmp_path / "out")}
    assert status == {ran.key: "ok", left.key: "pending"}
    plan = plan_sweep(points, store)
    assert list(plan.done) == [ran.key]
    assert [p.key for p in plan.todo] == [left.key]


def test_bad_worker_count_and_missing_ray_are_usage_errors(monkeypatch):
    with pytest.raises(SpecError, match="--workers"):
        LocalExecutor(0)
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SpecError, match=r"pip install teccl\[ray\]"):
        import_ray()


def test_workers_and_ray_address_together_is_exit_2(two_ok, teccl, tmp_path):
    code, _, err = teccl("sweep", two_ok, "-o", str(tmp_path / "o"), "--workers", "2",
                         "--ray-address", "auto")
    assert code == 2 and "--workers" in err


def test_unusable_output_directory_is_exit_2_before_any_point(two_ok, teccl, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = teccl("sweep", two_ok, "-o", str(blocker / "out"))
    assert code == 2 and "--output" in err and f"{blocker} is not a directory" in err


def test_larger_points_are_run_first(grid_file, tmp_path):
    grid = grid_file("topologies: [ring8, dgx2]\ncollectives: [allgather]\nsizes: [1MB]\n")
    points = expand_grid(load_grid(grid))
    plan = plan_sweep(points, ResultStore(tmp_path / "out"))
    assert [p.topology.name for p in points] == ["ring8", "dgx2"]
    assert [p.topology.name for p in plan.todo] == ["dgx2", "ring8"]


@pytest.mark.slow
def test_a_worker_crash_fails_only_the_point_that_caused_it(two_ok, monkeypatch):
    import dataclasses
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # spawned workers inherit it
    from crashing_point import CrashingCollective

    good = expand_grid(load_grid(two_ok))
    bad = dataclasses.replace(good[0], key="crash", name="crash", collective=CrashingCollective(
        **{f.name: getattr(good[0].collective, f.name)
           for f in dataclasses.fields(good[0].collective)}))
    results = {p.key: r.record for p, r in LocalExecutor(2).run([good[0], bad, good[1]])}
    assert results["crash"]["status"] == "failed"
    assert "worker process died" in results["crash"]["reason"]
    assert [results[p.key]["status"] for p in good] == ["ok", "ok"]


def test_rooted_points_are_indexed_but_never_published(grid_file, tmp_path):
    """The runtime selects an algorithm by collective and size, not by root: a root-0
    broadcast in msccl/TOPOLOGY would run for every root."""
    grid = grid_file("topologies: [ring8]\ncollectives: [allgather, {collective: broadcast, "
                     "root: 0}]\nsizes: [64KB]\ntime_limit: 10s\n")
    out = tmp_path / "out"
    code, info = sweep(str(grid), "-o", str(out), "--workers", "1")
    assert code == 0 and info["ok"] == 2
    rows = {r["collective"]: r for r in read_index(out)}
    assert rows["broadcast"]["status"] == "ok" and rows["broadcast"]["selected"] == "False"
    assert "not by root" in rows["broadcast"]["notes"]
    assert rows["allgather"]["selected"] == "True"
    assert [p.name for p in (out / "msccl" / "ring8").glob("*.xml")] == [
        rows["allgather"]["name"] + ".xml"]


def test_plain_progress_lines_off_a_terminal(one_ok_one_failed, teccl, tmp_path):
    code, _, err = teccl("sweep", one_ok_one_failed, "-o", str(tmp_path / "o"),
                         "--workers", "1", "--json")
    lines = [x for x in err.splitlines() if x.startswith("sweep ") and "/2 (ok" in x]
    assert code == 1 and len(lines) == 2 and lines[-1].startswith("sweep 2/2 (ok 1, failed 1)")
    code, _, err = teccl("--quiet", "sweep", one_ok_one_failed, "-o", str(tmp_path / "q"),
                         "--workers", "1", "--json")
    from te_ccl.cli.common import set_quiet

    set_quiet(False)
    assert code == 1 and err == ""


def test_sweep_writes_mscclpp_plans_that_verify(two_ok, tmp_path):
    """--format mscclpp: one plan a point with its size range, the winner in mscclpp/."""
    from te_ccl.verify.mscclpp.verify import check_plan

    out = tmp_path / "plans"
    code, info = sweep(two_ok, "-o", str(out), "--workers", "1", "--format", "mscclpp")
    assert code == 0 and info["ok"] == 2
    rows = read_index(out)
    for r in rows:
        assert r["format"] == "mscclpp" and r["xml"].endswith(".json")
        assert r["measured_by"] == "plan replay"
        plan = json.loads((out / r["xml"]).read_text())
        assert (plan["name"], plan["min_message_size"], plan["max_message_size"]) == \
            (r["name"], 0, 63999)
        assert check_plan(plan).valid
    (published,) = (out / "mscclpp" / "ring8").glob("*.json")
    (winner,) = [r for r in rows if r["selected"] == "True"]
    assert published.read_bytes() == (out / winner["xml"]).read_bytes()
    assert not (out / "msccl").exists()
    # the format is part of a point's key: the XML sweep of the same grid shares nothing
    xml_keys = {p.key for p in expand_grid(load_grid(two_ok))}
    assert xml_keys.isdisjoint(r["key"] for r in rows)


def test_sweep_refuses_a_collective_plans_do_not_cover(grid_file, teccl, tmp_path):
    grid = grid_file("topologies: [ring8]\ncollectives: [{collective: broadcast, root: 0}]\n"
                     "sizes: [1MB]\n")
    code, out, err = teccl("sweep", str(grid), "-o", str(tmp_path / "o"), "--format", "mscclpp")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "collectives[0]" in line and "MSCCL++" in line
    assert not (tmp_path / "o").exists()
