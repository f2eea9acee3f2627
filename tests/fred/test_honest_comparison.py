"""Figures set beside the paper's are like-for-like: a strategy-averaged figure against the
mean over strategies; busbw, nccl-tests' GPU-relay measure, omitted where switches reduce."""

from __future__ import annotations

import json

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import SpecError
from te_ccl.fred.evaluate import STRATEGY_MEAN_METRICS, evaluate, mean_comparison
from te_ccl.fred.in_switch import in_switch_schedule
from te_ccl.fred.strategy import all_strategies
from te_ccl.fred.workload import check_strategy, load_workload
from te_ccl.report.metrics import busbw_factor, in_switch, schedule_metrics
from te_ccl.schedule import Schedule, Transfer
from te_ccl.spec.topology import load_topology


def test_a_strategy_mean_figure_is_not_compared_with_one_strategy():
    ev = evaluate(load_workload("transformer17b"))
    by_metric = {c["metric"]: c for c in ev.comparison()}
    mean = by_metric["exposed_comm_reduction"]
    assert "exposed_comm_reduction" in STRATEGY_MEAN_METRICS
    assert not mean["comparable"] and mean["ratio"] is None
    assert by_metric["speedup"]["comparable"] and by_metric["speedup"]["ratio"] > 0


def test_the_mean_comparison_averages_over_the_named_strategies():
    w = load_workload("transformer17b")
    names = []
    for s in all_strategies(20):
        try:
            check_strategy(w, s.mp, s.pp)
        except SpecError:  # a strategy the workload cannot run
            continue
        names.append(s.name)
    evs = [evaluate(w, n) for n in names]
    (c,) = mean_comparison(evs)
    assert c["strategies"] == names and c["paper"] == 4.22
    cuts = [ev.result("fred-d").exposed_comm_reduction for ev in evs]
    assert abs(c["predicted"] - sum(cuts) / len(cuts)) < 1e-9
    assert abs(c["ratio"] - c["predicted"] / 4.22) < 1e-12
    assert mean_comparison([evaluate(w, npus=40)]) == []


def test_evaluate_prints_the_like_for_like_mean(teccl):
    code, out, _ = teccl("fred", "evaluate", "-w", "transformer17b")
    assert code == 0
    assert "not comparable with the paper's 4.22" in out
    assert "mean over 12 strategies" in out and "MP2-DP5-PP2" in out
    code, out, _ = teccl("fred", "evaluate", "-w", "transformer17b", "--json")
    d = json.loads(out)
    (c,) = d["paper_strategy_mean"]
    assert len(c["strategies"]) == 12 and c["ratio"] == c["predicted"] / c["paper"]
    code, out, _ = teccl("fred", "evaluate", "-w", "resnet152", "--json")
    assert json.loads(out)["paper_strategy_mean"] == []


def test_busbw_is_omitted_where_switches_reduce():
    topo = load_topology("fred-d")
    c = Collective(CollectiveKind.ALLREDUCE, 20 * 2**20, tuple(range(20)))
    s = in_switch_schedule(topo, c)
    assert in_switch(s) and busbw_factor(s) is None
    m = schedule_metrics(s)
    assert m.algbw_GBps and m.busbw_GBps is None


def test_a_switch_that_only_forwards_keeps_busbw():
    topo = load_topology("fred-d")
    gpus = topo.gpus
    l1 = topo.out_links(gpus[0])[0].dst
    c = Collective(CollectiveKind.ALLGATHER, 2000, (0, 1))
    forward = Schedule(topo, c, 1e-6, (Transfer(0, gpus[0], l1, 0, 1),
                                       Transfer(0, l1, gpus[1], 1, 2)))
    assert not in_switch(forward) and busbw_factor(forward) == c.busbw_factor
    multicast = Schedule(topo, c, 1e-6, (*forward.transfers, Transfer(0, l1, gpus[2], 1, 2)))
    assert in_switch(multicast) and busbw_factor(multicast) is None


def test_compile_prints_no_busbw_for_an_in_switch_allreduce(teccl, tmp_path):
    # the rounds backend sums in the switches and ends on its own in about a second
    args = ("compile", "fred-d", "-c", "allreduce", "-s", "20MB", "--backend", "rounds",
            "--time-limit", "600", "--format", "json", "--fred-tables", str(tmp_path / "t"))
    code, out, _ = teccl(*args, "-o", str(tmp_path / "a.json"), "--json")
    d = json.loads(out)
    assert code == 0 and d["algbw_GBps"] > 0 and d["busbw_GBps"] is None
    code, out, _ = teccl(*args, "-o", str(tmp_path / "b.json"))
    assert code == 0 and "n/a (in-switch)" in out
