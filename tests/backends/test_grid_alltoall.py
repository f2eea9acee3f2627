"""The grid AlltoAll: files of groups relayed in one step that verify, replay without
deadlock, and fit the runtime by the same arithmetic the compile refuses by."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest

import te_ccl
from te_ccl.backends.scale.grid import OPS, PER_CHANNEL, coords, grid_shape
from te_ccl.backends.scale.grid_alltoall import (
    METHOD,
    grid_elements,
    grid_hops,
    grid_plan,
    solve_grid_alltoall,
)
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler.fits import check_loadable, hop_sum
from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.lower.msccl.grid import grid_program
from te_ccl.lower.msccl.to_xml import gpu_xml
from te_ccl.model.problem import build_problem
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import Schedule, SolveInfo
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology.generators import mesh, torus
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule

GRIDS = [(mesh, (4, 4), 1), (torus, (3, 5), 2), (mesh, (3, 2, 4), 2), (torus, (3, 3, 3), 1),
         (mesh, (7,), 1), (torus, (6,), 3)]


def _a2a(topo: Topology, k: int = 1, size: int = 1 << 20) -> Collective:
    return Collective(CollectiveKind.ALLTOALL, size, tuple(range(topo.ngpus)),
                      chunks_per_rank=k)


def _schedule(topo: Topology, coll: Collective) -> Schedule:
    problem = build_problem(topo, coll)
    moves, notes = solve_grid_alltoall(problem, min_hops=0)
    info = SolveInfo(backend="scale", status=f"scale/{METHOD}: feasible (not proven optimal)",
                     notes=notes)
    return Schedule(topo, coll, problem.epoch_s, tuple(moves.transfers()), info)


@pytest.mark.parametrize(("make", "dims", "k"), GRIDS)
def test_the_file_verifies_and_replays_as_its_checked_schedule_moves(make, dims, k):
    topo = make(list(dims), 50e9, 5e-7)
    coll = _a2a(topo, k)
    schedule = _schedule(topo, coll)
    assert check_schedule(schedule) == []
    xml = lower_to_msccl(schedule)
    assert any(f'type="s" srcbuf="s" srcoff="{o}"'.encode() in xml for o in range(4))  # relays
    assert max(int(c) for c in re.findall(rb'cnt="(\d+)"', xml)) > k  # groups in one step
    report = verify_msccl(xml.decode())
    assert report.valid, report.errors[:3]
    replayed = simulate_msccl(xml.decode(), topo, coll.size_bytes).finish_time_s
    assert replayed >= lower_bound(topo, coll).seconds * (1 - 1e-9)


@pytest.mark.parametrize(("make", "dims", "k"), GRIDS + [(mesh, (8, 8), 3), (torus, (6, 6), 1), (torus, (4, 4, 4), 1)])
def test_the_arithmetic_counts_the_elements_of_the_busiest_rank_exactly(make, dims, k):
    wrap = make is torus
    plan = grid_plan(dims, wrap, k)
    n = math.prod(dims)
    block_rank = plan.blocks[:, 0]
    step_rank = block_rank[np.searchsorted(plan.blocks[:, 4], np.arange(len(plan.steps)),
                                           side="right") - 1]
    elements = 1 + n + np.bincount(block_rank, minlength=n) + np.bincount(step_rank, minlength=n)
    assert grid_elements(dims, wrap, k)[0] == int(elements.max())
    assert grid_hops(dims, wrap) == hop_sum(make(list(dims), 1e9), tuple(range(n)))


@pytest.mark.parametrize(("make", "dims"), [(mesh, (4, 4)), (torus, (6, 4)), (torus, (3, 3, 3)),
                                            (mesh, (3, 2, 4))])
def test_each_family_crosses_the_dimensions_in_its_own_order(make, dims):
    """A chunk crosses the dimensions in the order of its family (destination's minus
    source's slowest coordinate, mod the dimensions), so every order carries chunks."""
    topo = make(list(dims), 50e9, 5e-7)
    m, n = len(dims), math.prod(dims)
    crossed: dict[int, list[tuple[int, int]]] = {}
    for x in _schedule(topo, _a2a(topo)).transfers:
        a, b = coords(int(x.src[1:]), dims), coords(int(x.dst[1:]), dims)
        dim = next(p for p in range(m) if a[p] != b[p])
        crossed.setdefault(x.chunk, []).append((x.start_epoch, dim))
    firsts = set()
    for chunk, hops in crossed.items():
        s, d = coords(chunk // n, dims)[0], coords(chunk % n, dims)[0]
        f = ((d - s) % dims[0] if make is torus else d - s) % m
        rank = {p: (p - f) % m for p in range(m)}  # position of a dimension in the order
        seq = [rank[dim] for _, dim in sorted(hops)]
        assert seq == sorted(seq), (chunk, f, hops)
        firsts.add(min(hops)[1])
    assert firsts == set(range(m))


def test_a_grid_with_a_link_removed_or_in_place_gets_no_grid_file():
    topo = mesh([4, 4], 50e9)
    assert grid_shape(topo) == ((4, 4), False)
    cut = Topology.build("cut", topo.nodes, [x for x in topo.links if x.key != ("g0", "g1")],
                         meta=topo.meta)
    assert grid_shape(cut) is None
    assert solve_grid_alltoall(build_problem(cut, _a2a(cut)), min_hops=0) is None
    schedule = _schedule(topo, _a2a(topo))
    assert grid_program(schedule, "a", "Simple", 0, 0, MSCCL) is not None
    inplace = replace(schedule.collective, inplace=True)
    for other in (replace(schedule, collective=inplace),
                  schedule.with_info(status="scale/flow-alltoall: feasible")):
        assert grid_program(other, "a", "Simple", 0, 0, MSCCL) is None


def test_an_element_over_a_step_or_ranks_over_the_reader_get_the_reason():
    assert "more than a step carries" in grid_plan((8, 8), False, 9)
    why = grid_plan((16, 8, 8), True, 1)  # 2D grids' rows fit (tests/backends/test_grid_blocks.py)
    assert "XML elements" in why and "by rows: the row AlltoAll takes 2D grids" in why


def test_a_256_gpu_mesh_alltoall_is_loadable_and_a_1024_gpu_3d_torus_refused_with_both_reasons():
    check_loadable(_a2a(mesh([16, 16], 50e9)), mesh([16, 16], 50e9))
    with pytest.raises(RuntimeLimitError, match="the grid AlltoAll.*needs 7,841 elements"):
        check_loadable(_a2a(torus([8, 8, 16], 50e9)), torus([8, 8, 16], 50e9))


@pytest.mark.slow
def test_a_mesh16x16_alltoall_compile_writes_a_verified_grid_file(tmp_path):
    out = tmp_path / "a.xml"
    result = te_ccl.compile("mesh16x16", "alltoall", size="1MB", output=str(out))
    assert result.status.startswith(f"scale/{METHOD}")
    assert verify_msccl(out.read_text()).valid


def test_a_links_channels_take_its_groups_in_turn():
    """Each link's groups fill its channels one after the other, PER_CHANNEL a channel,
    and a later channel's first step is a nop that waits for the previous channel's last
    send: the link carries them in the list schedule's order, not as its channels race."""
    plan = grid_plan((8, 8), False, 2)
    ends = np.append(plan.blocks[1:, 4], len(plan.steps))
    sends: dict[tuple[int, int], dict[int, tuple[int, int, int]]] = {}
    for tb, ((rank, send, _, chan, first), end) in enumerate(zip(plan.blocks, ends, strict=True)):
        if send >= 0:
            local = tb - int(np.searchsorted(plan.blocks[:, 0], rank))
            sends.setdefault((rank, send), {})[chan] = (local, first, end)
    nop, send_op = OPS.index("nop"), OPS.index("s")
    assert any(len(chans) > 1 for chans in sends.values())
    for chans in sends.values():
        assert sorted(chans) == list(range(len(chans)))
        for c, (_, first, end) in chans.items():
            ops = plan.steps[first:end, 0]
            assert (ops == send_op).sum() == PER_CHANNEL or c == len(chans) - 1
            if c:
                before, start, stop = chans[c - 1]
                assert ops[0] == nop and ops[1] == send_op
                assert tuple(plan.steps[first, 6:8]) == (before, stop - start - 1)
                assert plan.steps[stop - 1, 8] == 1  # the waited-for send says so
            else:
                assert nop not in ops


def test_where_a_link_latency_outlasts_a_chunk_the_channels_run_at_once():
    """Above one chunk time of latency one channel at a time would leave its link idle
    while the connection's slots wait out the latency: the channels are dealt round-robin,
    no nop orders them, and the file reads fewer elements than the arithmetic's bound."""
    turns, at_once = grid_plan((8, 8), False, 2), grid_plan((8, 8), False, 2, alpha=2.0)
    nop = OPS.index("nop")
    assert (turns.steps[:, 0] == nop).any() and not (at_once.steps[:, 0] == nop).any()
    assert len(at_once.steps) < len(turns.steps)
    assert len(at_once.blocks) == len(turns.blocks)


def test_where_a_link_latency_outlasts_many_chunks_its_groups_spread_over_more_channels():
    """1 KB on a mesh 8×8: a chunk is 1/1600 of a link's latency. Thirty-two groups a
    channel would wait for its connection's few slots, a latency each; spread over more
    channels the file replays as its schedule does, at the bound's latency."""
    topo = mesh([8, 8], 50e9, 5e-7)
    coll = _a2a(topo, size=1000)
    schedule = _schedule(topo, coll)
    plan = grid_plan((8, 8), False, 1, alpha=1600.0)
    assert plan.nchannels > grid_plan((8, 8), False, 1, alpha=2.0).nchannels
    block_rank = plan.blocks[:, 0]
    step_rank = block_rank[np.searchsorted(plan.blocks[:, 4], np.arange(len(plan.steps)),
                                           side="right") - 1]
    elements = 1 + 64 + np.bincount(block_rank) + np.bincount(step_rank)
    spread = plan.nchannels
    assert grid_elements((8, 8), False, 1, MSCCL, spread)[0] >= int(elements.max())
    xml = lower_to_msccl(schedule).decode()
    replayed = simulate_msccl(xml, topo, coll.size_bytes).finish_time_s
    assert replayed <= lower_bound(topo, coll).seconds * 1.01


@pytest.mark.parametrize(("make", "dims", "k"), GRIDS[:2])
def test_the_streamed_text_prints_the_program_as_its_objects_do(make, dims, k):
    schedule = _schedule(make(list(dims), 50e9, 5e-7), _a2a(make(list(dims), 50e9, 5e-7), k))
    _, gpus = grid_program(schedule, "a", "Simple", 0, 0, MSCCL)
    _, text = grid_program(schedule, "a", "Simple", 0, 0, MSCCL, text=True)
    assert text == [gpu_xml(g).encode() for g in gpus]
