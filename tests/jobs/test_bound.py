"""The joint lower bound: hand arithmetic on shared links, and no replay beats it."""

import json

import pytest

from devtools.jobs_bench import SCENARIOS
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.jobs.bound import joint_bound
from te_ccl.jobs.spec import Job, JobSet, jobs_from
from te_ccl.spec.topology import load_topology
from te_ccl.topology import Link, Node, Topology


def _pair_jobs(weights: tuple[float, float], kind: CollectiveKind = CollectiveKind.ALLGATHER
               ) -> JobSet:
    t = Topology.build("pair", [Node("a"), Node("b")],
                       [Link("a", "b", 1e9, 0.0), Link("b", "a", 1e9, 0.0)])
    rooted = kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE, CollectiveKind.GATHER,
                      CollectiveKind.SCATTER)
    c = Collective(kind, 2000, (0, 1), root=0 if rooted else None)
    return JobSet(t, (Job("x", c, weights[0]), Job("y", c, weights[1])))


def test_two_jobs_on_one_link_finish_one_after_the_other_at_best():
    # each job moves 1000 B each way over a 1 GB/s link: 1 us alone, 2 us for both
    assert joint_bound(_pair_jobs((1, 1)), "max").seconds == pytest.approx(2e-6)
    assert joint_bound(_pair_jobs((1, 1)), "weighted").seconds == pytest.approx(3e-6)
    # the heavier job goes first: 3·1 + 1·2
    assert joint_bound(_pair_jobs((1, 3)), "weighted").seconds == pytest.approx(5e-6)


@pytest.mark.parametrize("kind, each_s", [
    (CollectiveKind.BROADCAST, 2e-6), (CollectiveKind.REDUCE, 2e-6),
    (CollectiveKind.GATHER, 1e-6), (CollectiveKind.SCATTER, 1e-6),
    (CollectiveKind.REDUCESCATTER, 1e-6), (CollectiveKind.ALLREDUCE, 2e-6)])
def test_every_kind_puts_its_bytes_on_the_link_it_needs(kind, each_s):
    # a Broadcast or Reduce moves the whole 2000 B across, Gather and Scatter the half
    # the root does not hold; one job after the other
    assert joint_bound(_pair_jobs((1, 1), kind), "max").seconds == pytest.approx(2 * each_s)
    assert joint_bound(_pair_jobs((1, 1), kind), "weighted").seconds == \
        pytest.approx(3 * each_s)


def test_ndv2x4_shared_row_is_bound_by_one_boxs_nic():
    s = next(s for s in SCENARIOS if s.topology == "ndv2x4" and s.name == "2 jobs, shared")
    jobs = jobs_from(load_topology("ndv2x4"), {"jobs": [dict(j) for j in s.jobs]}, None)
    # into box 0 through its one 12.5 GB/s NIC: the AllGather's 24 of 32 chunks of 2 MB
    # (3.84 ms) and the AllReduce's 64 MB (5.12 ms); the AllReduce (weight 2) first:
    # 2 · 5.12 + (5.12 + 3.84)
    b = joint_bound(jobs, "weighted")
    assert b.seconds == pytest.approx(2 * 5.12e-3 + 8.96e-3)
    assert "b0.g0" in b.resource
    assert joint_bound(jobs, "max").seconds == pytest.approx(8.96e-3)


def test_jobs_apart_are_bound_by_their_own_bounds():
    s = next(s for s in SCENARIOS if s.topology == "ndv2x4" and s.name == "4 jobs, apart")
    jobs = jobs_from(load_topology("ndv2x4"), {"jobs": [dict(j) for j in s.jobs]}, None)
    assert joint_bound(jobs, "weighted").resource == "own bounds"


@pytest.mark.parametrize("objective", ["weighted", "max"])
def test_no_replay_of_files_together_beats_the_bound(tmp_path, teccl, objective):
    """Rings of AllGather and AllReduce on overlapping GPUs of dgx1, replayed together
    by simulate --jobs: the bound it reports is at most their objective."""
    for kind, ranks in (("allgather", "0-3"), ("allreduce", "0,1,4,5")):
        code, _, err = teccl("baseline", "ring", "dgx1", "-c", kind, "-s", "64MB",
                             "--ranks", ranks, "-o", str(tmp_path / f"{kind}.xml"))
        assert code == 0, err
    (tmp_path / "jobs.yaml").write_text("""jobs:
  - {name: ag, ranks: [g0, g1, g2, g3], collective: allgather, size: 64MB,
     xml: allgather.xml}
  - {name: ar, ranks: [g0, g1, g4, g5], collective: allreduce, size: 64MB, weight: 3,
     xml: allreduce.xml}
""")
    code, stdout, err = teccl("simulate", "dgx1", "--jobs", str(tmp_path / "jobs.yaml"),
                              "--json", "--objective", objective)
    assert code == 0, err
    info = json.loads(stdout)
    assert info["shared_links"] > 0
    assert 0 < info["bound"] <= info["together"]
