"""Workloads from published configurations and the iteration-time model: no per-workload
knob, every assumption reported, the paper's figures compared rather than fitted."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.errors import SpecError
from te_ccl.fred.evaluate import (
    Assumptions,
    evaluate,
    mesh_cut_rate,
    parse_sweep,
    sweep_points,
)
from te_ccl.fred.mesh import WAFER_MESH, wafer_mesh
from te_ccl.fred.strategy import all_strategies, compile_phase, parse_strategy
from te_ccl.fred.wafer import VARIANTS, wafer_variant
from te_ccl.fred.workload import Workload, check_strategy, load_workload, shipped_workloads
from te_ccl.topology.generators import wafer_shape

PUBLISHED_PARAMS = {"resnet152": 60.2e6, "transformer17b": 17.2e9, "gpt3": 175e9,
                    "transformer1t": 1008e9}


def test_shipped_workloads_have_no_per_workload_tuning_knob():
    assert set(PUBLISHED_PARAMS) <= set(shipped_workloads())
    tunable = {"npu_flops", "samples_per_microbatch", "microbatches", "dp_overlap",
               "efficiency"}
    assert not tunable & {f.name for f in dataclasses.fields(Workload)}
    for name, params in PUBLISHED_PARAMS.items():
        w = load_workload(name)
        assert w.source and w.global_batch > 0 and w.paper
        assert w.params == pytest.approx(params, rel=0.03)


def test_transformer_blocks_follow_from_the_configuration():
    w = load_workload("transformer17b")
    layer = w.blocks[0]
    h, s = 4256, 1024
    assert layer.count == 78 and layer.params == 12 * h * h
    assert layer.fwd_flops == s * (24 * h * h + 4 * s * h)
    assert layer.mp_allreduces == 4 and layer.mp_allreduce_elements == s * h == layer.pp_elements
    assert w.heads == 28


def test_assumptions_are_reported_with_every_result():
    ev = evaluate(load_workload("transformer17b"))
    d = ev.to_dict()
    assert d["assumptions"] == dataclasses.asdict(Assumptions())
    assert len(Assumptions().lines()) == len(dataclasses.fields(Assumptions))
    assert d["global_batch"] == 512
    metrics = {(c["metric"], c["fabric"]) for c in d["paper"]}
    assert ("exposed_comm_reduction", "fred-d") in metrics and ("speedup", "fred-c") in metrics


def test_compute_scales_with_peak_times_efficiency():
    w = load_workload("resnet152")
    base = evaluate(w).result("fred-d")
    half = evaluate(w, assumptions=Assumptions(efficiency=0.25)).result("fred-d")
    assert half.compute_s == pytest.approx(2 * base.compute_s)
    assert half.dp_s == pytest.approx(base.dp_s)  # communication does not depend on it
    flops = 3 * sum(b.count * b.fwd_flops for b in w.blocks) * 256 / 20 / (989e12 * 0.5)
    assert base.compute_s == pytest.approx(flops)


def test_speedups_move_with_the_assumptions_and_exposed_comm_does_not_depend_on_compute():
    w = load_workload("resnet152")
    small, large = (evaluate(w, assumptions=Assumptions(global_batch=b)).result("fred-d")
                    for b in (20, 2000))
    assert small.speedup > large.speedup > 1
    assert small.exposed_comm_reduction == pytest.approx(large.exposed_comm_reduction)


def test_fred_d_cuts_exposed_communication_most():
    ev = evaluate(load_workload("transformer17b"))
    cuts = {r.fabric: r.exposed_comm_reduction for r in ev.results}
    assert cuts["wafer-mesh5x4"] == 1.0
    assert cuts["fred-d"] >= cuts["fred-c"] >= cuts["fred-a"]
    assert cuts["fred-d"] > cuts["fred-b"] > cuts["fred-a"]


def test_weight_streaming_is_io_bound_on_the_mesh():
    ev = evaluate(load_workload("transformer1t"))
    mesh, fred = ev.result("wafer-mesh5x4"), ev.result("fred-c")
    assert mesh.io_s / fred.io_s == pytest.approx(1152 / 750)


def test_strategies_are_validated_against_the_workload():
    ev = evaluate(load_workload("transformer17b"), "MP4-DP5-PP1")
    assert ev.strategy == "MP4-DP5-PP1" and ev.result("fred-d").pp_s == 0
    with pytest.raises(SpecError, match="model-parallel activation"):
        evaluate(load_workload("resnet152"), "MP2-DP10")
    with pytest.raises(SpecError, match="heads"):
        evaluate(load_workload("transformer17b"), "MP5-DP4")
    with pytest.raises(SpecError, match="expected 20"):
        evaluate(load_workload("gpt3"), "MP3-DP5")


def test_sweep_parsing_and_points():
    assert parse_sweep("efficiency=0.3,0.5") == ("efficiency", [0.3, 0.5])
    points = sweep_points(Assumptions(), [("efficiency", [0.3, 0.5]), ("microbatches", [4])])
    assert [label for label, _ in points] == ["efficiency=0.3 microbatches=4",
                                              "efficiency=0.5 microbatches=4"]
    assert points[0][1].microbatches == 4 and isinstance(points[0][1].microbatches, int)
    for bad in ("colour=1", "efficiency=fast", "microbatches=2.5", "efficiency="):
        with pytest.raises(SpecError, match="--sweep"):
            parse_sweep(bad)


def test_bad_workload_files(tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text("name: x\nglobal_batch: 1\nparams: 1\nblocks: [{params: 1, fwd_flops: 1}]\n"
                   "npu_flops: 1e12\n")
    with pytest.raises(SpecError, match="npu_flops"):
        load_workload(str(bad))
    bad.write_text("name: x\nglobal_batch: 1\nparams: 5\nblocks: [{params: 1, fwd_flops: 1}]\n")
    with pytest.raises(SpecError, match="published"):
        load_workload(str(bad))
    bad.write_text("name: x\nglobal_batch: 1\ntransformer: {layers: 2, hidden: 8}\n")
    with pytest.raises(SpecError, match="transformer.heads"):
        load_workload(str(bad))
    with pytest.raises(SpecError):
        load_workload("nosuchworkload")


@pytest.mark.parametrize("npus", [40, 80])
def test_any_wafer_size(npus):
    ev = evaluate(load_workload("transformer17b"), npus=npus)
    assert ev.npus == npus and ev.strategy == f"MP2-DP{npus // 4}-PP2"
    assert ev.results[0].fabric == wafer_mesh(npus).name and ev.comparison() == []
    assert ev.result("fred-d").exposed_comm_reduction > 1
    w = wafer_variant("fred-d", npus)
    assert w.n_l1 == npus // 4 and w.io_controllers == wafer_mesh(npus).io_controllers
    with pytest.raises(SpecError, match="expected 40"):
        evaluate(load_workload("gpt3"), "MP2-DP5-PP2", npus=40)


def test_wafer_sizes_are_validated():
    assert wafer_shape(20) == (5, 4) and wafer_mesh(20) == WAFER_MESH
    assert wafer_variant("fred-b", 20) is VARIANTS["fred-b"]
    for bad in (42, 4):
        with pytest.raises(SpecError, match="npus"):
            wafer_variant("fred-d", bad)


@st.composite
def _evaluation_points(draw) -> tuple[str, str, int, Assumptions]:
    """A workload, a wafer size, a strategy it admits and assumptions, all drawn."""
    npus = draw(st.sampled_from([8, 16, 20, 32]))
    key = draw(st.sampled_from(shipped_workloads()))
    w = load_workload(key)
    admitted = []
    for s in all_strategies(npus):
        try:
            check_strategy(w, s.mp, s.pp)
        except SpecError:
            continue
        admitted.append(s.name)
    a = Assumptions(global_batch=draw(st.sampled_from([None, float(npus), 4.0 * npus])),
                    wire_latency_s=draw(st.sampled_from([0.0, 5e-9, 1e-6])),
                    uswitch_latency_s=draw(st.sampled_from([0.0, 0.5e-9, 1e-7])))
    return key, draw(st.sampled_from(admitted)), npus, a


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(point=_evaluation_points())
def test_reducing_switches_never_lose_in_the_evaluation(point):
    """FRED-B contains FRED-A's hardware, FRED-D FRED-C's: whatever the workload, strategy,
    wafer size, batch and latencies, every phase and the iteration are at least as fast
    (each phase runs the faster way at its size, not at the size it was compiled at)."""
    name, strategy, npus, a = point
    ev = evaluate(load_workload(name), strategy, assumptions=a, npus=npus)
    for with_, without in (("fred-b", "fred-a"), ("fred-d", "fred-c")):
        b, f = ev.result(with_), ev.result(without)
        for part in ("mp_s", "pp_s", "dp_s", "iteration_s"):
            assert getattr(b, part) <= getattr(f, part) * (1 + 1e-12)
    # no mesh schedule beats its bound: against it, every advantage is at most as large
    for r in ev.results:
        assert r.speedup_vs_mesh_bound <= r.speedup * (1 + 1e-12)
        assert r.exposed_comm_reduction_vs_mesh_bound <= r.exposed_comm_reduction * (1 + 1e-12)


def test_the_speedup_is_also_shown_against_the_mesh_bound():
    """No mesh schedule beats the bound, so FRED-D's cut of Transformer-17B's exposed
    communication is at most as large against it as against the mesh's model, and above 1."""
    ev = evaluate(load_workload("transformer17b"))
    mesh, d = ev.results[0], ev.result("fred-d")
    assert mesh.fabric.startswith("wafer-mesh") and mesh.speedup_vs_mesh_bound < 1
    assert 1 < d.exposed_comm_reduction_vs_mesh_bound < d.exposed_comm_reduction
    assert "exposed_comm_reduction_vs_mesh_bound" in ev.to_dict()["fabrics"][0]


def test_concurrent_collectives_share_the_mesh_cuts():
    """MP2-DP10 on the 5x4 mesh: the cut between the first two columns separates five MP
    pairs, each moving its buffer across each way over that cut's five links, so the MP
    phase needs a byte per 750 GB/s: what the mesh's rings take, each on its one link."""
    s = parse_strategy("MP2-DP10")
    assert mesh_cut_rate(s, "MP") == pytest.approx(1 / 750e9)
    ring = compile_phase(WAFER_MESH, s, "MP", 1e9)
    assert (ring.time_s - ring.fixed_s) / 1e9 == pytest.approx(mesh_cut_rate(s, "MP"))
