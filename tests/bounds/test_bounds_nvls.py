"""The NVLink SHARP AllReduce bound (``nvls_s``, te_ccl.bounds): its closed form, and no
MSCCL++ plan replayed as the executor runs it (te_ccl.simulate.plan: the switch's sum
goes to the reading GPU and back up to be multicast) finishes before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.baselines import BASELINES
from te_ccl.bounds import lower_bound, nvls_allreduce_time
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.lower.mscclpp import lower_to_mscclpp
from te_ccl.simulate.plan import simulate_plan
from te_ccl.topology.generators import SwitchCaps, star

PLANS = Path(__file__).parents[1] / "verify" / "mscclpp" / "data"
NVLS = SwitchCaps(nvls=True, reduce=True)


def allreduce(n: int, size: int) -> Collective:
    return Collective(CollectiveKind.ALLREDUCE, size, tuple(range(n)))


@given(st.integers(2, 64), st.floats(1e9, 1e12))
def test_the_closed_form_lies_between_the_strategies_it_mixes(n, bandwidth):
    """N GPUs at B each way: M(N²−2)/(N(N−1)B), never above a load-reduce and store of
    every element (M(1+1/N)/B) nor RS + AG (2(N−1)/N·M/B), and never below M/B."""
    topo, m = star(n, bandwidth, switch=NVLS), 1e9
    got = nvls_allreduce_time(topo, list(topo.gpus), m)
    assert got == pytest.approx(m * (n * n - 2) / (n * (n - 1) * bandwidth))
    assert m / bandwidth * (1 - 1e-12) <= got
    assert got <= min(1 + 1 / n, 2 * (n - 1) / n) * m / bandwidth * (1 + 1e-12)


def test_it_applies_only_where_the_hardware_is_nvls_and_every_gpu_takes_part():
    topo = star(4, 1e9, switch=NVLS)
    assert nvls_allreduce_time(topo, ["g0", "g1"], 1.0) is None
    assert nvls_allreduce_time(star(4, 1e9, switch=SwitchCaps(reduce=True)),
                               ["g0", "g1", "g2", "g3"], 1.0) is None  # FRED keeps sums
    assert "nvls_s" in lower_bound(topo, allreduce(4, 4096)).parts


@settings(max_examples=12)
@given(st.integers(2, 6), st.sampled_from(["ring", "direct"]), st.floats(1e9, 1e11))
def test_no_template_plan_beats_the_nvls_bound(n, template, bandwidth):
    topo, coll = star(n, bandwidth, 1e-6, switch=NVLS), allreduce(n, n * (1 << 20))
    plan = json.loads(lower_to_mscclpp(BASELINES[template](topo, coll)))
    replayed = simulate_plan(plan, topo, coll.size_bytes).finish_time_s
    assert replayed >= lower_bound(topo, coll).seconds * (1 - 1e-9)


def test_the_mscclpp_nvls_allreduce_example_does_not_beat_it():
    """The MSCCL++ repository's NVLS AllReduce on 4 ranks (multimem load-reduce and store
    of every element, M(1+1/N)/B), on 4 GPUs of an NVLS switch."""
    topo, coll = star(4, 450e9, 0.7e-6, switch=NVLS), allreduce(4, 1 << 30)
    plan = json.loads((PLANS / "dsl-allreduce_nvls_zero_copy.json").read_text())
    replayed = simulate_plan(plan, topo, coll.size_bytes).finish_time_s
    assert replayed >= lower_bound(topo, coll).parts["nvls_s"]
