"""The MSCCL++ lowering: every plan it writes passes the independent plan checker, stays
within the executor's limits, and drives NVLS where the schedule sums in a switch."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from te_ccl.baselines import BASELINES
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import TecclError
from te_ccl.lower.mscclpp import lower_to_mscclpp
from te_ccl.schedule import Schedule, Transfer
from te_ccl.spec.topology import load_topology
from te_ccl.topology import Link, Node, Topology
from te_ccl.topology.model import NodeKind
from te_ccl.verify.mscclpp import verify_plan
from te_ccl.verify.schedule_check import check_schedule

K = CollectiveKind


def baseline(topo: str, kind: str, name: str = "ring", chunks: int = 1,
             inplace: bool = False) -> Schedule:
    t = load_topology(topo)
    coll = Collective(K(kind), 1 << 20, tuple(range(t.ngpus)), chunks, inplace=inplace)
    return BASELINES[name](t, coll)


def plan_of(schedule: Schedule) -> dict:
    data = lower_to_mscclpp(schedule)
    report = verify_plan(data.decode())
    assert report.valid, report.errors[:5]
    return json.loads(data)


def op_names(plan: dict) -> set[str]:
    return {op["name"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]}


@pytest.mark.parametrize("topo", ["ring8", "dgx1"])
@pytest.mark.parametrize("kind,name", [("allgather", "ring"), ("allreduce", "ring"),
                                       ("reducescatter", "ring"), ("alltoall", "direct")])
@pytest.mark.parametrize("inplace", [False, True])
def test_baselines_lower_to_checked_plans(topo, kind, name, inplace):
    plan = plan_of(baseline(topo, kind, name, inplace=inplace))
    assert plan["collective"] == kind and plan["inplace"] is inplace
    assert len(plan["gpus"]) == 8 and plan["protocol"] == "Simple"


def test_many_chunks_open_lanes_within_the_op_limit():
    """16 chunks a rank on a ring: more steps than one block holds, so a pair of ranks
    gets several lanes (channels), each block at most 64 ops."""
    plan = plan_of(baseline("ring8", "allgather", chunks=16))
    g = plan["gpus"][0]
    assert max(len(tb["ops"]) for tb in g["threadblocks"]) <= 64
    peers = g["channels"][0]["connected_to"]
    assert len(peers) > 2 and set(peers) == {1, 7}


def test_deterministic():
    s = baseline("dgx1", "allreduce")
    assert lower_to_mscclpp(s) == lower_to_mscclpp(s)


def test_unsupported_collective_is_refused():
    coll = Collective(K.BROADCAST, 1 << 20, tuple(range(8)), 1, root=0)
    with pytest.raises(TecclError, match="MSCCL\\+\\+ execution plans cover"):
        lower_to_mscclpp(Schedule(load_topology("ring8"), coll, 1e-6, ()))


def star(n: int = 4) -> Topology:
    """``n`` GPUs on one switch that adds and multicasts (an NVLS switch)."""
    gpus = [Node(f"g{i}") for i in range(n)]
    sw = Node("sw", NodeKind.SWITCH, can_copy=True, can_reduce=True)
    links = [x for i in range(n) for x in (Link(f"g{i}", "sw", 1e12), Link("sw", f"g{i}", 1e12))]
    return Topology.build("star", [*gpus, sw], links)


def test_sums_made_in_the_switch_become_glres():
    """AllReduce on a reducing switch: every rank sends its partials in, the switch sends
    each sum to every rank: one multimem load-reduce-store per chunk."""
    topo, n = star(), 4
    coll = Collective(K.ALLREDUCE, 4096, tuple(range(n)))
    ts = [Transfer(k, f"g{r}", "sw", 0, 1, "reduce") for k in range(n) for r in range(n)]
    ts += [Transfer(k, "sw", f"g{r}", 1, 2) for k in range(n) for r in range(n)]
    s = Schedule(topo, coll, 1e-6, tuple(ts))
    assert check_schedule(s) == []
    plan = plan_of(s)
    names = op_names(plan)
    assert "glres" in names and "put" not in names
    switch = [c for c in plan["gpus"][0]["channels"] if c["channel_type"] == "switch"]
    assert switch[0]["rank_groups"][0]["ranks"] == [0, 1, 2, 3]


def test_switch_sum_for_a_rank_outside_the_group_is_put_and_added():
    """ReduceScatter: the other three ranks' partials meet in the switch and the sum goes
    to the owner, who adds its own: glres among the three, a put to the owner, a ``re``."""
    topo, n = star(), 4
    coll = Collective(K.REDUCESCATTER, 4096, tuple(range(n)))
    ts = [Transfer(k, f"g{r}", "sw", 0, 1, "reduce") for k in range(n) for r in range(n) if r != k]
    ts += [Transfer(k, "sw", f"g{k}", 1, 2, "reduce") for k in range(n)]
    s = Schedule(topo, coll, 1e-6, tuple(ts))
    assert check_schedule(s) == []
    names = op_names(plan_of(s))
    assert {"glres", "put", "re"} <= names
    assert op_names(plan_of(replace(s, collective=replace(coll, inplace=True)))) >= {"glres"}


def test_a_value_an_nvls_switch_copies_to_several_ranks_is_one_gstore():
    """AllGather on an NVLS switch: each rank sends its chunk in once, the switch copies it
    to the other three: one multimem store per chunk (into every member's output, the
    sender's own included), no puts and no local copy; the replay's GPU→switch links carry
    each chunk once."""
    from te_ccl.simulate.plan import simulate_plan

    n = 4
    gpus = [Node(f"g{i}") for i in range(n)]
    sw = Node("sw", NodeKind.SWITCH, can_copy=True, can_reduce=True, nvls=True)
    links = [x for i in range(n) for x in (Link(f"g{i}", "sw", 1e9), Link("sw", f"g{i}", 1e9))]
    topo = Topology.build("nvls4", [*gpus, sw], links)
    coll = Collective(K.ALLGATHER, 4096, tuple(range(n)))
    ts = [Transfer(k, f"g{k}", "sw", k, k + 1) for k in range(n)]  # one chunk an epoch
    ts += [Transfer(k, "sw", f"g{r}", k + 1, k + 2) for k in range(n) for r in range(n) if r != k]
    s = Schedule(topo, coll, 1.024e-6, tuple(ts))
    assert check_schedule(s) == []
    plan = plan_of(s)
    ops = [op for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]]
    stores = [op for op in ops if op["name"] == "gstore"]
    assert len(stores) == n and not {"put", "copy"} & {op["name"] for op in ops}
    assert {op["dst_buff"][0]["index"] for op in stores} == set(range(n))  # output slots
    busy = {(u.src, u.dst): u.busy_s for u in simulate_plan(plan, topo, 4096).links}
    for i in range(n):  # 1024 bytes at 1 GB/s, once
        assert busy[(f"g{i}", "sw")] == pytest.approx(1024 / 1e9)
    assert "gstore" in op_names(plan_of(replace(s, collective=replace(coll, inplace=True))))


def test_load_reduces_are_cut_into_parts():
    """AllReduce on 4 ranks of an NVLS switch: with 4 chunks a rank each rank sums 4 by
    glres, so its last is cut in halves of what is left (tail_cuts); with one chunk a
    rank its one glres is cut into equal ops (even_cuts). Chunk counts and every other
    reference are in parts, and the plans check."""
    from te_ccl.lower.mscclpp.threadblocks import (
        SPLIT_FROM,
        SPLIT_OPS,
        SPLIT_PARTS,
        even_cuts,
        tail_cuts,
    )

    n, c = 4, 4
    gpus = [Node(f"g{i}") for i in range(n)]
    sw = Node("sw", NodeKind.SWITCH, can_copy=True, can_reduce=True, nvls=True)
    links = [x for i in range(n) for x in (Link(f"g{i}", "sw", 1e9), Link("sw", f"g{i}", 1e9))]
    topo = Topology.build("nvls4", [*gpus, sw], links)
    coll = Collective(K.ALLREDUCE, 1 << 16, tuple(range(n)), c)
    ts = [Transfer(k, f"g{r}", "sw", k, k + 1, "reduce") for k in range(n * c) for r in range(n)]
    ts += [Transfer(k, "sw", f"g{r}", k + 1, k + 2) for k in range(n * c) for r in range(n)]
    s = Schedule(topo, coll, 4096 / 1e9, tuple(ts))
    assert check_schedule(s) == [] and c >= SPLIT_FROM
    tail = [size for _, size in tail_cuts(SPLIT_PARTS)]
    assert sum(tail) == SPLIT_PARTS and tail[-1] == 1
    for g in plan_of(s)["gpus"]:
        assert g["input_chunks"] == n * c * SPLIT_PARTS
        loads = [op for tb in g["threadblocks"] for op in tb["ops"] if op["name"] == "glres"]
        assert [op["src_buff"][0]["size"] for op in loads] == [SPLIT_PARTS] * (c - 1) + tail
    few = Collective(K.ALLREDUCE, 1 << 16, tuple(range(n)), 1)  # one load-reduce a rank
    plan = plan_of(Schedule(topo, few, 4096 / 1e9, tuple(t for t in ts if t.chunk < n)))
    for g in plan["gpus"]:
        assert g["input_chunks"] == n * SPLIT_PARTS
        loads = [op for tb in g["threadblocks"] for op in tb["ops"] if op["name"] == "glres"]
        assert [(op["src_buff"][0]["index"] % SPLIT_PARTS, op["src_buff"][0]["size"])
                for op in loads] == even_cuts(SPLIT_PARTS, SPLIT_OPS)
    # a chunk that takes the link less than its α is not cut (a cut op adds a round trip)
    slow = [Link(x.src, x.dst, x.bandwidth_Bps, 1e-5) for x in links]
    far = Topology.build("nvls4", [*gpus, sw], slow)
    plan = plan_of(Schedule(far, coll, 4096 / 1e9 + 2e-5, tuple(ts)))
    assert plan["gpus"][0]["input_chunks"] == n * c


def test_ranks_in_different_boxes_use_port_channels():
    """Two boxes of 8: CUDA IPC within a box (memory channels), the proxy between them."""
    plan = plan_of(baseline("ndv2x2", "allreduce", "hierarchical"))
    types = {c["channel_type"]: c["connected_to"] for c in plan["gpus"][0]["channels"]}
    assert set(types) == {"memory", "port"}
    assert all(p < 8 for p in types["memory"]) and all(p >= 8 for p in types["port"])


def test_a_lane_that_waits_before_its_puts_needs_no_handshake():
    """The relaxed handshake only where a block could write into a peer that has not
    entered the run: a ring's lanes put first and keep it; NVLS contributions (a signal
    each way, then the load-reduces) have their signals for it."""
    def handshakes(plan: dict) -> int:
        return sum(op["name"] == "rlxsignal" for g in plan["gpus"]
                   for tb in g["threadblocks"] for op in tb["ops"])

    assert handshakes(plan_of(baseline("ring8", "allgather"))) > 0
    n = 4
    gpus = [Node(f"g{i}") for i in range(n)]
    sw = Node("sw", NodeKind.SWITCH, can_copy=True, can_reduce=True, nvls=True)
    links = [x for i in range(n) for x in (Link(f"g{i}", "sw", 1e9), Link("sw", f"g{i}", 1e9))]
    topo = Topology.build("nvls4", [*gpus, sw], links)
    coll = Collective(K.ALLREDUCE, 1 << 16, tuple(range(n)), 1)
    ts = [Transfer(k, f"g{r}", "sw", k, k + 1, "reduce") for k in range(n) for r in range(n)]
    ts += [Transfer(k, "sw", f"g{r}", k + 1, k + 2) for k in range(n) for r in range(n)]
    assert handshakes(plan_of(Schedule(topo, coll, 4096 / 1e9, tuple(ts)))) == 0
