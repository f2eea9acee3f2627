"""Several jobs in one flow problem: merging, barred relays, per-job finish epochs; and
the single-collective model left exactly as it was."""

from __future__ import annotations

import hashlib

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.model.extract import split_by_job
from te_ccl.model.formulation import formulate
from te_ccl.model.problem import allreduce_problem, build_problem, members_of, merge_problems
from te_ccl.model.ten import TimeExpandedNetwork
from te_ccl.schedule import Transfer
from te_ccl.spec.topology import load_topology

TOPO = load_topology("dgx1")
AG = Collective(CollectiveKind.ALLGATHER, 8_000_000, (0, 1, 2, 3))
AR = Collective(CollectiveKind.ALLREDUCE, 8_000_000, (0, 1, 4, 5))


def _digest(form) -> str:
    h = hashlib.sha256()
    h.update(repr(list(form.variables.items())).encode())
    h.update(repr(form.rows).encode())
    h.update(repr(list(form.objective.items())).encode())
    return h.hexdigest()[:16]


def test_single_collective_formulation_is_unchanged() -> None:
    """Digests of the formulation as it was before jobs could share a model."""
    assert _digest(formulate(build_problem(TOPO, AG), 6)) == "f2e3f825f58ad5da"
    assert _digest(formulate(allreduce_problem(TOPO, AR), 8)) == "17bdb9f76337d58f"


def _joint():
    parts = {"ag": build_problem(TOPO, AG), "ar": allreduce_problem(TOPO, AR)}
    barred = {"ag": frozenset(TOPO.gpus) - members_of(TOPO, AG),
              "ar": frozenset(TOPO.gpus) - members_of(TOPO, AR)}
    return merge_problems(parts, barred, {"ag": 1, "ar": 3}), parts


def test_merge_renumbers_chunks_and_keeps_roles() -> None:
    (joint, offsets), parts = _joint()
    assert offsets == {"ag": 0, "ar": 4}
    assert len(joint.demands) == len(parts["ag"].demands) + len(parts["ar"].demands)
    assert {joint.owners[d.chunk] for d in joint.demands[:4]} == {"ag"}
    assert sorted(joint.reductions) == [4, 5, 6, 7]
    assert all(r.chunk == c for c, r in joint.reductions.items())
    held = {(c + offsets[j], n) for j, p in parts.items() for c, n in p.state.held}
    assert joint.state.held == held
    assert set(joint.timings) == {k.key for k in TOPO.links}  # the whole network


def test_barred_nodes_carry_none_of_a_jobs_chunks() -> None:
    (joint, _), _ = _joint()
    ten = TimeExpandedNetwork(joint, 10)
    for c, (u, v), _ in ten.x:
        assert u not in joint.barred_for(c) and v not in joint.barred_for(c)
    for _, c, (u, v), _ in ten.y:
        assert u not in joint.barred_for(c) and v not in joint.barred_for(c)
    # a single collective bars nothing
    assert build_problem(TOPO, AG).barred_for(0) == frozenset()


def test_finish_epochs_and_weighted_objective() -> None:
    (joint, _), _ = _joint()
    form = formulate(joint, 10)
    assert form.variables[("f", "ag")] == 10 and form.variables[("f", "ar")] == 10
    assert form.objective[("f", "ar")] == 3 * form.objective[("f", "ag")] > 0
    # every delivery of a job's chunk bounds its finish: f ≥ Σ t·arrivals
    rows = [r for r in form.rows if r[0][0][0] == ("f", "ag")]
    assert rows and all(lo is not None and hi is None for _, lo, hi in rows)
    assert not any(k[0] == "f" for k in formulate(joint, 10, demands=False).variables)


def test_split_by_job_numbers_chunks_as_each_job() -> None:
    (joint, offsets), _ = _joint()
    ts = [Transfer(1, "g0", "g1", 0, 1), Transfer(5, "g0", "g4", 0, 1, "reduce")]
    split = split_by_job(joint, ts, offsets)
    assert split == {"ag": [Transfer(1, "g0", "g1", 0, 1)],
                     "ar": [Transfer(1, "g0", "g4", 0, 1, "reduce")]}


def test_a_reduce_alone_has_a_horizon_bound() -> None:
    """A Reduce as one problem: its demands have no destination (the root holds the sum)."""
    from te_ccl.model.horizon import horizon_lower_bound

    reduce = Collective(CollectiveKind.REDUCE, 8_000_000, (0, 1, 4, 5), root=0)
    assert horizon_lower_bound(allreduce_problem(TOPO, reduce)) >= 1
