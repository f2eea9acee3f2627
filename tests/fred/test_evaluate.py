"""Workloads and the iteration-time model: published speedups within 20%."""

from __future__ import annotations

import pytest

from te_ccl.errors import SpecError
from te_ccl.fred.evaluate import evaluate
from te_ccl.fred.workload import load_workload, shipped_workloads

PUBLISHED = {"resnet152": (1.41, 1.76), "transformer17b": (1.75, 1.87),
             "gpt3": (1.34, 1.34), "transformer1t": (1.4, 1.4)}


def test_shipped_workloads_state_their_assumptions():
    assert set(PUBLISHED) <= set(shipped_workloads())
    for name in PUBLISHED:
        w = load_workload(name)
        assert w.source and len(w.assumptions) >= 3 and w.params > 0


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_speedups_over_the_mesh_within_20_percent(name):
    ev = evaluate(load_workload(name))
    c, d = ev.result("fred-c").speedup, ev.result("fred-d").speedup
    want_c, want_d = PUBLISHED[name]
    assert c == pytest.approx(want_c, rel=0.2)
    assert d == pytest.approx(want_d, rel=0.2)
    assert d >= c - 1e-9 and ev.result("wafer-mesh5x4").speedup == 1.0


def test_params_match_the_models():
    assert load_workload("resnet152").params == pytest.approx(60.2e6, rel=0.02)
    assert load_workload("transformer17b").params == pytest.approx(17.2e9, rel=0.02)
    assert load_workload("gpt3").params == pytest.approx(175e9, rel=0.02)
    assert load_workload("transformer1t").params == pytest.approx(1.0e12, rel=0.02)


def test_weight_streaming_is_io_bound_on_the_mesh():
    ev = evaluate(load_workload("transformer1t"))
    mesh, fred = ev.result("wafer-mesh5x4"), ev.result("fred-c")
    assert mesh.io_s / fred.io_s == pytest.approx(1152 / 750)


def test_strategy_override_and_bad_workloads(tmp_path):
    ev = evaluate(load_workload("transformer17b"), "MP4-DP5-PP1")
    assert ev.strategy == "MP4-DP5-PP1" and ev.result("fred-d").pp_s == 0
    bad = tmp_path / "w.yaml"
    bad.write_text("name: x\nnpu_flops: 1e12\nblocks: [{count: 1, params: 1, fwd_flops: 1}]\n"
                   "colour: red\n")
    with pytest.raises(SpecError, match="colour"):
        load_workload(str(bad))
    bad.write_text("name: x\nnpu_flops: fast\nblocks: [{count: 1, params: 1, fwd_flops: 1}]\n")
    with pytest.raises(SpecError, match="npu_flops"):
        load_workload(str(bad))
    with pytest.raises(SpecError):
        load_workload("nosuchworkload")
