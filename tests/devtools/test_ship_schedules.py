"""Every algorithm shipped in ``schedules/`` still verifies, and the index matches the files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devtools.ship_schedules import KINDS, RCCL_MACHINES, ship_all, shippable_topologies
from te_ccl.runtime_limits import RUNTIMES
from te_ccl.verify.msccl import verify_msccl
from te_ccl.verify.mscclpp.verify import check_plan

SHIPPED = Path(__file__).resolve().parents[2] / "schedules"
HANG_S = 600  # the run's budget only guards against a hang: its child is killed after it,
#              and a busy machine must not turn a slow solve into a skipped combination
LIMIT_S = 600  # each compile's, far above the seconds these take: the files, not the time


def _index() -> list[dict]:
    path = SHIPPED / "index.json"
    return json.loads(path.read_text()) if path.is_file() else []


def _files(suffix: str):
    for entry in _index():
        if entry["status"] != "ok":
            continue
        for name in entry["files"]:
            if name.endswith(suffix):
                yield pytest.param(name, entry.get("runtime", "msccl"), id=name)


def test_index_covers_every_shippable_combination():
    index = _index()
    assert {(e["topology"], e["collective"]) for e in index} == \
        {(t.name, k) for t in shippable_topologies() for k in KINDS}, \
        "schedules/ is stale: run `make schedules`"
    assert sum(e["status"] == "ok" for e in index) >= len(index) // 2
    for entry in index:
        if entry["status"] == "ok":
            assert all((SHIPPED / f).is_file() for f in entry["files"])
        else:
            assert entry["reason"]
            assert not (SHIPPED / entry["topology"] / f"{entry['collective']}.xml").exists()


def test_each_machine_ships_for_the_runtime_it_runs():
    """NVLink SHARP machines: MSCCL++ plans; the AMD machines: XML to RCCL's rules."""
    from devtools.ship_schedules import output_for

    topologies = {t.name: t for t in shippable_topologies()}
    for entry in _index():
        if entry["status"] != "ok":
            continue
        topo = topologies[entry["topology"]]
        nvls = any(topo.node(s).nvls for s in topo.switches)
        fmt = entry.get("format", "xml")
        assert fmt == "mscclpp" or not nvls or "MSCCL++ plan" in entry["alternative"]
        assert fmt == "xml" or nvls, entry["topology"]
        assert entry.get("runtime", "msccl") == ("rccl" if topo.name in RCCL_MACHINES
                                                  else "msccl"), entry["topology"]
        assert entry["files"][0].endswith(".plan.json" if fmt == "mscclpp" else ".xml")
        assert fmt == "xml" or output_for(topo).suffix == ".plan.json"


@pytest.mark.parametrize(("name", "runtime"), list(_files(".xml")))
def test_shipped_xml_verifies(name, runtime):
    report = verify_msccl(SHIPPED / name, limits=RUNTIMES[runtime])
    assert report.valid, [str(f) for f in report.errors][:3]


@pytest.mark.parametrize(("name", "runtime"), list(_files(".plan.json")))
def test_shipped_plans_pass_the_plan_checker(name, runtime):
    report = check_plan(json.loads((SHIPPED / name).read_text()))
    assert report.valid, report.errors[:3]


def test_shipped_summaries_name_their_files():
    for entry in _index():
        if entry["status"] == "ok":
            summary = json.loads((SHIPPED / entry["topology"] / f"{entry['collective']}.json")
                                 .read_text())
            assert summary["output"] == entry["files"][0]
            assert summary["finish_time_s"] > 0 and summary["ngpus"] == entry["ngpus"]


def test_shipped_numbers_are_the_replay_of_the_shipped_xml(tmp_path):
    """Every number in the index is the XML's replay; the smallest file, replayed again
    from a copy, gives the index's numbers."""
    import shutil

    from devtools.ship_schedules import remeasure_one

    ok = [e for e in _index() if e["status"] == "ok"]
    assert all(e["measured_by"] == ("plan replay" if e["files"][0].endswith(".plan.json")
                                    else "xml replay") for e in ok), \
        "run `python -m devtools.ship_schedules schedules --remeasure`"
    for suffix in (".xml", ".plan.json"):  # the smallest of each format
        entry = min((e for e in ok if e["files"][0].endswith(suffix)),
                    key=lambda e: (SHIPPED / e["files"][0]).stat().st_size)
        for name in entry["files"]:
            (tmp_path / name).parent.mkdir(exist_ok=True)
            shutil.copyfile(SHIPPED / name, tmp_path / name)
        again = remeasure_one(entry, tmp_path)
        for key in ("finish_time_s", "algbw_GBps", "bound_ratio", "measured_by"):
            assert again[key] == pytest.approx(entry[key]), key


def test_ship_all_writes_verified_files_and_an_index(tmp_path):
    entries = ship_all(tmp_path, budget_s=HANG_S, max_limit_s=10, topologies=["fc8"],
                       kinds=("allgather",))
    assert [e["status"] for e in entries] == ["ok"]
    for name in entries[0]["files"]:
        assert (tmp_path / name).is_file()
    assert verify_msccl(tmp_path / "fc8" / "allgather.inplace.xml").valid
    assert json.loads((tmp_path / "index.json").read_text()) == entries
    assert "fc8 | 8 | allgather | ok" in (tmp_path / "README.md").read_text()


@pytest.mark.slow
def test_ship_one_fits_both_buffer_modes_into_the_runtime(tmp_path):
    """dgx1 AlltoAll at 64 MiB: the scale plan's sub-chunks overflow the channels in
    place and out of place; the compile falls back to fewer, both files load."""
    from devtools.ship_schedules import ship_one
    from te_ccl.spec.topology import load_topology

    entry = ship_one(load_topology("dgx1"), "alltoall", tmp_path, 90.0)  # a limit, not a goal
    for name in ("alltoall.xml", "alltoall.inplace.xml"):
        assert verify_msccl(tmp_path / "dgx1" / name).valid, name
    summary = json.loads((tmp_path / "dgx1" / "alltoall.json").read_text())
    assert any(n.startswith("msccl: solved again") for n in summary["notes"])
    assert entry["bound_ratio"] < 1.05


def test_a_job_that_overruns_is_killed_and_recorded(tmp_path, monkeypatch):
    import time

    from devtools import ship_schedules
    from te_ccl.spec.topology import load_topology

    finished = tmp_path / "finished"  # the child would write it after its 60 s
    monkeypatch.setattr(ship_schedules, "ship_one", lambda *args: (time.sleep(60), finished.touch()))
    entry = ship_schedules.isolated(load_topology("fc8"), "allgather", tmp_path, 1.0, hard_s=2)
    assert entry["status"] == "skipped" and "no result within 2 s" in entry["reason"]
    assert not finished.exists()  # killed at its hard limit, not waited for


def test_a_job_that_outgrows_its_memory_is_killed_and_recorded(tmp_path, monkeypatch):
    import time

    from devtools import ship_schedules
    from te_ccl.spec.topology import load_topology

    here = ship_schedules.resident_bytes(os.getpid())
    if here is None:
        pytest.skip("no /proc: resident memory is not observable here")
    limit = here + (256 << 20)  # the forked child starts near the parent's size

    def hog(*args, grow: bool):
        ballast = bytearray(512 << 20) if grow else b""  # zero-filled, so resident
        time.sleep(60)
        return ballast

    fc8 = load_topology("fc8")
    monkeypatch.setattr(ship_schedules, "ship_one", lambda *a: hog(grow=True))
    entry = ship_schedules.isolated(fc8, "allgather", tmp_path, 1.0, hard_s=30,
                                     memory_bytes=limit)
    assert entry["status"] == "skipped" and entry["reason"].startswith("out of memory")
    monkeypatch.setattr(ship_schedules, "ship_one", lambda *a: hog(grow=False))
    entry = ship_schedules.isolated(fc8, "allgather", tmp_path, 1.0, hard_s=3,
                                     memory_bytes=limit)
    assert entry["reason"].startswith("no result within 3 s")


def _tracked() -> set[str]:
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-z", "schedules"], cwd=SHIPPED.parent,
                             capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return {name.removeprefix("schedules/") for name in out.split("\0") if name}


def test_every_tracked_file_is_one_make_schedules_writes():
    """What `make schedules` writes, with its parameters, is exactly what is tracked: the
    index and README of each half and the files of their ok entries, none over the
    Makefile's size budget; the directory stays small enough to keep in the repository.
    (The full reproduction solves for minutes and is run by hand: schedules/README.md.)"""
    import csv

    from devtools.ship_families import MACHINES
    from devtools.ship_schedules import README_BUDGET, _readme
    from te_ccl.units import parse_size

    makefile = (SHIPPED.parent / "Makefile").read_text()
    recipe = makefile.split("\nschedules:", 1)[1].split("\n\n", 1)[0]
    assert recipe.count(f"--max-file-size {README_BUDGET}") == 2, recipe
    index = _index()
    with (SHIPPED / "families" / "index.csv").open(newline="") as f:
        families = list(csv.DictReader(f))
    assert {r["topology"] for r in families} == set(MACHINES)
    made = {"README.md", "index.json", "families/index.csv"}
    made |= {name for e in index if e["status"] == "ok" for name in e["files"]}
    made |= {f"families/{r['file']}" for r in families if r["status"] == "ok"}
    tracked = _tracked()
    assert tracked == made, (sorted(tracked - made)[:5], sorted(made - tracked)[:5])
    sizes = {name: (SHIPPED / name).stat().st_size for name in tracked}
    over = [n for n, size in sizes.items() if size > parse_size(README_BUDGET) and n not in
            ("index.json", "families/index.csv")]
    assert not over, over
    assert sum(sizes.values()) <= 20 << 20
    assert (SHIPPED / "README.md").read_text() == _readme(index), \
        "schedules/README.md is stale: run `make schedules`"


@pytest.mark.slow
def test_an_nvls_machine_ships_the_faster_of_its_plan_and_its_xml(tmp_path):
    """dgx-h100: the MSCCL++ plan and the MSCCL XML are both compiled, the faster ships,
    the entry says what the other took, and it remeasures to the numbers it shipped with."""
    from devtools.ship_schedules import remeasure_one

    (entry,) = ship_all(tmp_path, budget_s=HANG_S, min_limit_s=LIMIT_S, max_limit_s=LIMIT_S,
                        topologies=["dgx-h100"], kinds=("allgather",))
    assert entry["status"] == "ok"
    other = "MSCCL XML" if entry["format"] == "mscclpp" else "MSCCL++ plan"
    took = float(entry["alternative"].split(": ")[1].split(" us")[0])
    assert other in entry["alternative"] and entry["finish_time_s"] * 1e6 <= took + 0.1
    suffix = ".plan.json" if entry["format"] == "mscclpp" else ".xml"
    assert entry["files"][:2] == [f"dgx-h100/allgather{suffix}",
                                  f"dgx-h100/allgather.inplace{suffix}"]
    assert sorted(p.name for p in (tmp_path / "dgx-h100").iterdir()) == sorted(
        f.split("/")[1] for f in entry["files"])  # the other format's files are gone
    again = remeasure_one(entry, tmp_path)
    for key in ("finish_time_s", "bound_ratio", "measured_by"):
        assert again[key] == pytest.approx(entry[key]), key


def test_an_amd_machine_ships_xml_held_to_rccl_rules(tmp_path):
    from devtools.ship_schedules import remeasure_one

    (entry,) = ship_all(tmp_path, budget_s=HANG_S, min_limit_s=LIMIT_S, max_limit_s=LIMIT_S,
                        topologies=["mi300x"], kinds=("allgather",))
    assert (entry["status"], entry["format"], entry["runtime"]) == ("ok", "xml", "rccl")
    for name in entry["files"][:2]:
        assert verify_msccl(tmp_path / name, limits=RUNTIMES["rccl"]).valid
    assert remeasure_one(entry, tmp_path)["finish_time_s"] == pytest.approx(
        entry["finish_time_s"])
    assert "| mi300x | 8 | allgather | ok | RCCL XML |" in (tmp_path / "README.md").read_text()
