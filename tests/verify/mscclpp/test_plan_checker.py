"""The MSCCL++ plan checker on the MSCCL++ repository's own example plans (data/README.md),
on plans teccl writes, and on mutants of both: a removed signal, a moved offset, a
channel to the wrong peer must each be rejected."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.baselines import BASELINES
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.lower.mscclpp import lower_to_mscclpp
from te_ccl.spec.topology import load_topology
from te_ccl.verify.mscclpp import verify_plan
from te_ccl.verify.mscclpp.verify import check_plan

DATA = Path(__file__).parent / "data"
REJECTED = {"files-allreduce_pipeline.json": "missing key 'buffer_type'",
            "reduce_tbg.json": "race: rank 0 block 0 op 7 (get) reads rank 1 s"}
ACCEPTED = sorted(p.name for p in DATA.glob("*.json") if p.name not in REJECTED)


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("name", ACCEPTED)
def test_example_plans_are_accepted(name):
    report = check_plan(load(name))
    assert report.valid, report.errors[:3]
    assert report.ops > 0


@pytest.mark.parametrize("name,why", sorted(REJECTED.items()))
def test_example_plans_the_executor_cannot_run_are_rejected(name, why):
    report = check_plan(load(name))
    assert not report.valid and any(why in e for e in report.errors)


def teccl_plan(topo: str, kind: str, name: str = "ring") -> dict:
    t = load_topology(topo)
    coll = Collective(CollectiveKind(kind), 1 << 20, tuple(range(t.ngpus)))
    return json.loads(lower_to_mscclpp(BASELINES[name](t, coll)))


PLANS = {"ring8-allreduce": teccl_plan("ring8", "allreduce"),
         "dgx1-allgather": teccl_plan("dgx1", "allgather"),
         "dgx1-alltoall": teccl_plan("dgx1", "alltoall", "direct"),
         "reduce.json": load("reduce.json"),
         "files-allreduce.json": load("files-allreduce.json"),
         "reduce_nvls.json": load("reduce_nvls.json")}


def ops_where(plan: dict, names: set[str] | None = None, key: str = "name"
              ) -> list[tuple[int, int, int]]:
    return [(g["id"], tb["id"], k) for g in plan["gpus"] for tb in g["threadblocks"]
            for k, op in enumerate(tb["ops"])
            if (op["name"] in names if names else key in op)]


def rejected(plan: dict) -> list[str]:
    report = check_plan(plan)
    assert not report.valid
    return report.errors


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(PLANS)), st.data())
def test_a_removed_signal_is_rejected(which, data):
    plan = copy.deepcopy(PLANS[which])
    g, tb, k = data.draw(st.sampled_from(ops_where(plan, {"signal", "rlxsignal"})))
    del plan["gpus"][g]["threadblocks"][tb]["ops"][k]
    errors = rejected(plan)
    assert any(e.startswith("deadlock") or "race" in e for e in errors)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(PLANS)), st.data())
def test_a_moved_offset_is_rejected(which, data):
    """An op that writes one chunk further on: the data lands in the wrong place (or
    past the buffer)."""
    plan = copy.deepcopy(PLANS[which])
    g, tb, k = data.draw(st.sampled_from(ops_where(plan, key="dst_buff")))
    op = plan["gpus"][g]["threadblocks"][tb]["ops"][k]
    op["dst_buff"][0]["index"] += 1
    rejected(plan)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([p for p in sorted(PLANS) if p != "reduce_nvls.json"]), st.data())
def test_a_channel_to_the_wrong_peer_is_rejected(which, data):
    plan = copy.deepcopy(PLANS[which])
    n = len(plan["gpus"])
    g = data.draw(st.sampled_from([x["id"] for x in plan["gpus"] if x["channels"]]))
    chans = next(c for c in plan["gpus"][g]["channels"] if c["channel_type"] == "memory")
    i = data.draw(st.integers(0, len(chans["connected_to"]) - 1))
    old = chans["connected_to"][i]
    chans["connected_to"][i] = data.draw(st.sampled_from([p for p in range(n)
                                                         if p not in (g, old)] or [g]))
    rejected(plan)


def test_report_names_what_is_wrong():
    plan = copy.deepcopy(PLANS["reduce.json"])
    plan["gpus"][0]["threadblocks"][0]["ops"][0]["src_buff"][0]["index"] = 9
    errors = rejected(plan)
    assert "chunks 9..10 of rank 0's 'i' buffer, which has 4" in errors[0]


def test_unpaired_signals_are_reported():
    """A signal nobody waits for would release the next run's wait early."""
    plan = copy.deepcopy(PLANS["reduce.json"])
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    ops.append({"name": "signal", "channel_ids": [0], "channel_type": "memory"})
    assert any("signals its memory channel to rank 1 3 time(s); rank 1 waits 2" in e
               for e in rejected(plan))


def test_not_json():
    assert verify_plan("{").errors[0].startswith("not JSON")


@pytest.mark.parametrize("args,code", [((), 0), (("--json",), 0)])
def test_cli_accepts_a_plan(teccl, args, code):
    rc, out, _ = teccl("verify", *args, str(DATA / "reduce_nvls.json"))
    assert rc == code
    if args:
        assert json.loads(out)["valid"] is True
    else:
        assert "MSCCL++ plan 'allreduce_nvls'" in out and "valid" in out


def test_cli_rejects_a_racy_plan_and_garbage(teccl, tmp_path):
    rc, out, _ = teccl("verify", str(DATA / "reduce_tbg.json"))
    assert rc == 1 and "race:" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    rc, _, err = teccl("verify", str(bad))
    assert rc == 2 and "not JSON" in err


def test_waits_before_signals_on_both_sides_deadlock():
    """Each rank waits for the other before it signals: no order runs it."""
    plan = copy.deepcopy(PLANS["reduce.json"])
    for g in plan["gpus"]:
        ops = g["threadblocks"][0]["ops"]
        s = next(i for i, op in enumerate(ops) if op["name"] == "signal")
        w = next(i for i, op in enumerate(ops) if op["name"] == "wait")
        ops[s], ops[w] = ops[w], ops[s]
    errors = rejected(plan)
    assert errors[0].startswith("deadlock: rank 0 block 0 op 2 (wait) waits for signal 1")


def _paths(obj, path=()):
    yield path
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield from _paths(v, (*path, k))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["reduce.json", "reduce_nvls.json", "transfer_pack_tbg.json"]),
       st.data(), st.sampled_from([None, "x", -1, 10**9, 1.5, [], {}, [1, "a"], True]))
def test_values_of_the_wrong_type_are_errors_not_crashes(name, data, value):
    plan = load(name)
    path = data.draw(st.sampled_from(list(_paths(plan))[1:]))
    parent = plan
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    check_plan(plan)  # reports or accepts; never raises


@pytest.mark.parametrize("which", ["ring8-allreduce", "reduce.json"])
def test_a_missing_nop_before_a_signal_is_rejected(which):
    plan = copy.deepcopy(PLANS[which])
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            ops = tb["ops"]
            for k in range(1, len(ops) - 1):
                if ops[k]["name"] == "nop" and ops[k + 1]["name"] == "signal" \
                        and ops[k - 1]["name"] in ("put", "copy", "res", "rres"):
                    del ops[k]
                    assert any("with no nop between" in e for e in rejected(plan))
                    return
    raise AssertionError("no nop before a signal")
