"""Replaying MSCCL++ execution plans (te_ccl.simulate.plan) on the shared α-β engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from te_ccl.baselines import BASELINES
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import VerificationError
from te_ccl.lower.mscclpp import lower_to_mscclpp
from te_ccl.simulate import simulate_schedule
from te_ccl.simulate.plan import plan_finish_s, simulate_plan
from te_ccl.spec.topology import load_topology

PLANS = Path(__file__).parents[1] / "verify" / "mscclpp" / "data"


def ring_plan(kind: str) -> tuple[dict, float]:
    topo = load_topology("ring8")
    coll = Collective(CollectiveKind(kind), 1 << 20, tuple(range(8)))
    schedule = BASELINES["ring"](topo, coll)
    return json.loads(lower_to_mscclpp(schedule)), simulate_schedule(schedule).finish_time_s


@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_a_plan_takes_its_schedule_time_plus_its_signals(kind):
    """The plan moves the schedule's bytes on the same links, and adds the latency of the
    handshake and of a signal per batch: never faster, and within a few link latencies
    per step of the ring."""
    plan, scheduled = ring_plan(kind)
    sim = simulate_plan(plan, load_topology("ring8"), 1 << 20)
    steps = 7 if kind == "allgather" else 14
    alpha = load_topology("ring8").link("g0", "g1").latency_s
    assert scheduled <= sim.finish_time_s <= scheduled + (steps + 2) * 2 * alpha + 1e-12


def test_nvls_sum_goes_through_the_switch():
    plan = json.loads((PLANS / "reduce_nvls.json").read_text())
    topo = load_topology("dgx-h100")
    sim = simulate_plan(plan, topo, 1 << 20)
    used = {(u.src, u.dst) for u in sim.links}
    assert ("g0", "sw") in used and ("sw", "g1") in used and sim.finish_time_s > 0


def test_a_plan_the_checker_rejects_is_not_replayed():
    plan = json.loads((PLANS / "reduce_tbg.json").read_text())
    with pytest.raises(VerificationError, match="race"):
        simulate_plan(plan, load_topology("ring8"), 1 << 20)


def test_cli_needs_topology_and_size(teccl):
    rc, _, err = teccl("simulate", str(PLANS / "reduce.json"))
    assert rc == 2 and "--size SIZE" in err
    rc, out, _ = teccl("simulate", "ring8", str(PLANS / "reduce.json"), "--size", "1MB",
                       "--json")
    assert rc == 0 and json.loads(out)["backend"] == "mscclpp:reduce"


def test_the_finish_alone_is_the_replays():
    """What the compile's judge reads (plan_finish_s) is the full replay's finish time."""
    topo = load_topology("dgx-h100")
    coll = Collective(CollectiveKind.ALLREDUCE, 1 << 20, tuple(range(8)))
    plan = json.loads(lower_to_mscclpp(BASELINES["ring"](topo, coll)))
    assert plan_finish_s(plan, topo, 1 << 20) == simulate_plan(plan, topo, 1 << 20).finish_time_s
