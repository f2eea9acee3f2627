"""compile --jobs and simulate --jobs end to end on small jobs, and the independent checks."""

import json

import pytest

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import WRITE_RESERVE_S as COMPILE_RESERVE_S
from te_ccl.jobs import load_jobs
from te_ccl.jobs.joint import MIN_COMPILE_S, MIX_SLOTS
from te_ccl.schedule import Schedule, Transfer
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.topology import Link, Node, Topology
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.shared_capacity import check_shared_capacity

APART = """jobs:
  - {name: left, ranks: [g3, g0, g1], collective: allgather, size: 1MB}
  - {name: right, ranks: [g5, g4], collective: allreduce, size: 2MB, weight: 2}
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Two jobs on the two quads of dgx1 (no link in common), compiled jointly."""
    from te_ccl.cli.main import main

    tmp = tmp_path_factory.mktemp("jobs")
    (tmp / "jobs.yaml").write_text(APART)
    out = tmp / "out"
    with pytest.raises(SystemExit) as e:
        main(["compile", "dgx1", "--jobs", str(tmp / "jobs.yaml"), "-o", str(out), "--json",
              "--time-limit", "20"])
    assert e.value.code == 0
    return tmp, out


def test_jobs_apart_compile_as_alone_one_verified_file_each(compiled, capsys):
    tmp, out = compiled
    assert sorted(p.name for p in out.iterdir()) == ["left.xml", "right.xml"]
    jobs = load_jobs(load_topology("dgx1"), tmp / "jobs.yaml")
    for job in jobs.jobs:
        report = verify_msccl(out / f"{job.name}.xml")
        assert report.valid and report.algo.ngpus == len(job.ranks)


def test_simulate_jobs_replays_the_files_on_the_jobs_ranks(compiled, teccl):
    tmp, out = compiled
    code, stdout, _ = teccl("simulate", "dgx1", "--jobs", str(tmp / "jobs.yaml"), str(out),
                            "--json", "--objective", "max")
    assert code == 0
    info = json.loads(stdout)
    topo = load_topology("dgx1")
    rows = {r["name"]: r for r in info["jobs"]}
    # rank i of left.xml runs on the i-th GPU the job lists (g3, g0, g1)
    alone = simulate_msccl(out / "left.xml", topo, 10**6, ranks=(3, 0, 1)).finish_time_s
    assert rows["left"]["alone_s"] == pytest.approx(alone, rel=1e-12)
    assert info["shared_links"] == 0
    for r in rows.values():  # apart, together is alone
        assert r["together_s"] == pytest.approx(r["alone_s"], rel=1e-12)
    assert info["together"] == max(r["together_s"] for r in rows.values())


@pytest.mark.slow  # every candidate, the templates and mix under a 20 s limit
def test_jobs_sharing_links_slow_each_other_and_keep_the_best_candidate(tmp_path, teccl):
    (tmp_path / "jobs.yaml").write_text("""jobs:
  - {name: pair, ranks: [g0, g1], collective: allgather, size: 1MB}
  - {name: quad, ranks: [g0, g1, g2, g3], collective: allgather, size: 1MB}
""")
    code, stdout, err = teccl("compile", "dgx1", "--jobs", str(tmp_path / "jobs.yaml"),
                              "-o", str(tmp_path / "out"), "--json", "--time-limit", "20")
    assert code == 0, err
    info = json.loads(stdout)
    assert info["shared_links"] > 0 and info["checks"]["schedule"] == 0
    assert info["joint"] == min(info["candidates"].values()) <= info["together"]
    assert info["bound"] <= info["joint"]  # no replay of files beats the joint bound
    # contention on the pair's links
    assert any(j["together_s"] > j["alone_s"] for j in info["jobs"])
    code, stdout, _ = teccl("simulate", "dgx1", "--jobs", str(tmp_path / "jobs.yaml"),
                            str(tmp_path / "out"), "--json")
    assert code == 0
    rows = json.loads(stdout)["jobs"]
    again = {r["name"]: r["together_s"] for r in rows}
    assert again == {j["name"]: pytest.approx(j["joint_s"], rel=1e-12) for j in info["jobs"]}
    # the baseline is each job's fastest file alone, the written one among those compiled
    best = {j["name"]: j["alone_s"] for j in info["jobs"]}
    assert all(r["alone_s"] >= best[r["name"]] * (1 - 1e-12) for r in rows)


def test_simulate_jobs_takes_any_xml_and_refuses_a_misfit(tmp_path, teccl):
    ring = tmp_path / "ring.xml"
    code, _, _ = teccl("baseline", "ring", "dgx1", "-c", "allgather", "-s", "1MB",
                       "--ranks", "0-3", "-o", str(ring))
    assert code == 0
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"""jobs:
  - {{name: a, ranks: [g0, g1, g2, g3], collective: allgather, size: 1MB, xml: {ring.name}}}
  - {{name: b, ranks: [g0, g1, g2, g3], collective: allgather, size: 1MB, xml: {ring.name}}}
""")
    code, stdout, _ = teccl("simulate", "dgx1", "--jobs", str(jobs), "--json")
    assert code == 0
    rows = json.loads(stdout)["jobs"]
    assert rows[0]["together_s"] > rows[0]["alone_s"]  # the same ring twice on one ring
    jobs.write_text(f"""jobs:
  - {{name: a, ranks: [g0, g1, g2], collective: allgather, size: 1MB, xml: {ring.name}}}
""")
    code, _, err = teccl("simulate", "dgx1", "--jobs", str(jobs), "--json")
    assert code == 2 and "the file has 4 GPUs, job 'a' 3 ranks" in err
    code, _, err = teccl("simulate", "dgx1", "--jobs", str(jobs), str(tmp_path / "none"))
    assert code == 2


def _pair() -> tuple[Topology, Collective]:
    topo = Topology.build("pair", [Node("a"), Node("b")],
                          [Link("a", "b", 1e9), Link("b", "a", 1e9)])
    return topo, Collective(CollectiveKind.BROADCAST, 1000, (0, 1), root=0)


def test_shared_capacity_sums_jobs_of_different_epochs():
    topo, coll = _pair()
    # one chunk of 1000 bytes per 1 us epoch: the whole link
    full = Schedule(topo, coll, 1e-6, (Transfer(0, "a", "b", 0, 1),))
    # the same chunk over 2 us epochs: half of the link, or all of it in either half
    half = Schedule(topo, coll, 2e-6, (Transfer(0, "a", "b", 0, 1),))
    assert check_shared_capacity({"x": half, "y": half}) == []
    assert check_shared_capacity({"x": half, "y": full}) == []  # x in the second us
    # due within 1 us in 0.5 us epochs: with x, 2000 bytes in 1 us
    quick = Schedule(topo, coll, 0.5e-6, (Transfer(0, "a", "b", 0, 2),))
    over = check_shared_capacity({"x": full, "y": quick})
    assert [v.rule for v in over] == ["shared-capacity"] and "x, y" in over[0].message
    later = Schedule(topo, coll, 1e-6, (Transfer(0, "a", "b", 1, 2),))
    assert check_shared_capacity({"x": full, "y": later}) == []  # one after the other


def test_simulate_jobs_refuses_a_file_the_verifier_rejects(tmp_path, teccl):
    from pathlib import Path

    legacy = Path(__file__).parents[2] / "examples" / "legacy-ring4-allgather.xml"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"jobs:\n  - {{name: a, ranks: [g0, g1, g2, g3], collective: allgather, "
                    f"size: 1MB, xml: {legacy}}}\n")
    code, _, err = teccl("simulate", "dgx1", "--jobs", str(jobs))
    assert code == 1 and "the verifier rejects the file of job 'a'" in err


def test_exclusive_views_leave_a_shared_link_to_the_job_that_needs_it():
    from te_ccl.jobs.joint import _views
    from te_ccl.jobs.spec import jobs_from

    # pair (g0, g1) reaches only over g0-g1; ring (g0..g3) also around g2 and g3
    topo = Topology.build("ring4", [Node(f"g{i}") for i in range(4)],
                          [Link(f"g{i}", f"g{(i + d) % 4}", 1e9) for i in range(4)
                           for d in (1, 3)])
    jobs = jobs_from(topo, {"jobs": [
        {"name": "ring", "ranks": ["g0", "g1", "g2", "g3"], "collective": "allgather",
         "size": "1MB", "weight": 4},
        {"name": "pair", "ranks": ["g0", "g1"], "collective": "allgather", "size": "1MB"}]},
        None)
    shared = [("g0", "g1"), ("g1", "g0")]
    used = {n: {k: 1e6 for k in shared} for n in ("ring", "pair")}
    # the ring goes first by Smith's rule, yet the pair keeps the links it cannot do without
    views = _views(jobs, used, shared, "weighted", {"ring": 1.0, "pair": 1.0},
                   {"ring": 2.0, "pair": 2.0})["exclusive"]
    assert views == {"ring": {k: 0.0 for k in shared}, "pair": {}}


@pytest.mark.parametrize(("jobs", "compiles"), [
    (APART, 1),  # no route in common: only alone runs, on the whole limit
    ("""jobs:
  - {name: a, ranks: [g0, g1, g2, g3], collective: allgather, size: 1MB}
  - {name: b, ranks: [g1, g0, g5, g4], collective: allreduce, size: 2MB}
""", 5 + MIX_SLOTS)])  # alone, three views, flow and mix's (lowering, the descent)
def test_the_limit_is_split_over_the_candidates_that_can_run(jobs, compiles, tmp_path,
                                                            monkeypatch):
    import te_ccl
    import te_ccl.jobs.joint as joint

    given = []

    def stop(*_args, time_limit_s, **_kwargs):
        given.append(time_limit_s)
        raise _Stopped

    monkeypatch.setattr(joint, "left", lambda: 40.0)  # a clock that does not move
    monkeypatch.setattr(te_ccl, "compile", stop)
    (tmp_path / "jobs.yaml").write_text(jobs)
    with pytest.raises(_Stopped):
        joint.compile_jobs(load_jobs(load_topology("dgx1"), tmp_path / "jobs.yaml"), None,
                           time_limit_s=40)
    # a first file's compile gets at least its floor past the compile's writing reserve
    assert given == [max(40 / (compiles * 2), COMPILE_RESERVE_S + MIN_COMPILE_S)]


class _Stopped(Exception):
    """Raised in place of the first compile."""


@pytest.mark.parametrize("limit", [0.0, -1.0, float("nan")])
def test_a_limit_that_is_no_time_is_refused_as_the_option_not_as_a_job(limit, tmp_path):
    from te_ccl.errors import SpecError
    from te_ccl.jobs.joint import compile_jobs

    (tmp_path / "jobs.yaml").write_text(APART)
    jobs = load_jobs(load_topology("dgx1"), tmp_path / "jobs.yaml")
    with pytest.raises(SpecError) as e:
        compile_jobs(jobs, tmp_path / "out", time_limit_s=limit)
    assert e.value.key == "time-limit" and e.value.file is None
    assert not (tmp_path / "out").exists()


def test_a_limit_under_the_write_reserve_leaves_the_first_job_no_file(tmp_path):
    """Under :data:`~te_ccl.jobs.joint.WRITE_RESERVE_S` no compile has time, whatever the
    machine's speed: exit 3 naming the first job, not a job's input refused."""
    from te_ccl.deadline import TimeLimitReached
    from te_ccl.jobs.joint import WRITE_RESERVE_S, compile_jobs

    (tmp_path / "jobs.yaml").write_text(APART)
    jobs = load_jobs(load_topology("dgx1"), tmp_path / "jobs.yaml")
    with pytest.raises(TimeLimitReached, match="job 'left': no time left"):
        compile_jobs(jobs, tmp_path / "out", time_limit_s=WRITE_RESERVE_S / 2)
    assert not (tmp_path / "out").exists()
