"""Schedules built here, outside the solver, that the checker accepts, against the bound:
the line-of-three AllReduce that beats ReduceScatter + AllGather, and pipelined tree
schedules (sums along in-trees to a node, copies along out-trees from it, any node
meeting) on random small fabrics. None may finish — in its epochs, in the replay, or in
what `teccl simulate` reports — before the bound."""

from __future__ import annotations

import json
import math
from collections import defaultdict, deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.bounds import lower_bound
from te_ccl.cli.simulate import sim_summary
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.schedule import Schedule, Transfer
from te_ccl.simulate import simulate_schedule
from te_ccl.topology import Link, Node, Topology
from te_ccl.topology.generators import mesh
from te_ccl.verify.schedule_check import check_schedule
from tests.bounds.strategies import collectives, fabrics

K = CollectiveKind


def line_schedule(chunks: int = 8) -> Schedule:
    """AllReduce of 3 MB on g0 – g1 – g2 (1 GB/s each way): the ends send every chunk's
    partial to g1, which adds them and copies the sum back, a chunk per epoch per link."""
    coll = Collective(K.ALLREDUCE, 3_000_000, (0, 1, 2), chunks)
    epoch = coll.chunk_bytes / 1e9
    moves = []
    for c in range(coll.nchunks):
        moves += [Transfer(c, "g0", "g1", c, c + 1, "reduce"),
                  Transfer(c, "g2", "g1", c, c + 1, "reduce"),
                  Transfer(c, "g1", "g0", c + 1, c + 2), Transfer(c, "g1", "g2", c + 1, c + 2)]
    return Schedule(mesh([3], 1e9), coll, epoch, tuple(moves))


def test_the_line_of_three_beats_reducescatter_plus_allgather_not_the_bound():
    s = line_schedule()
    assert check_schedule(s) == []
    replay = simulate_schedule(s).finish_time_s
    assert s.finish_time_s == pytest.approx(3.125e-3) and replay == pytest.approx(3.125e-3)
    rs = lower_bound(s.topology, Collective(K.REDUCESCATTER, 3_000_000, (0, 1, 2)))
    ag = lower_bound(s.topology, Collective(K.ALLGATHER, 3_000_000, (0, 1, 2)))
    assert rs.seconds + ag.seconds == pytest.approx(4e-3)  # what the bound used to be
    bound = lower_bound(s.topology, s.collective)
    assert bound.seconds == pytest.approx(3e-3)
    assert bound.seconds <= replay
    assert sim_summary(s.topology, s.collective, simulate_schedule(s))["bound_ratio"] >= 1


def test_teccl_simulate_reports_the_line_schedule_at_or_above_its_bound(tmp_path, teccl):
    topo = tmp_path / "line3.yaml"
    topo.write_text("generator: {kind: mesh, dims: [3], bandwidth: 1GB/s}\n")
    path = tmp_path / "line.json"
    path.write_text(line_schedule().to_json())
    code, out, _ = teccl("simulate", str(topo), str(path), "--json")
    assert code == 0
    info = json.loads(out)
    assert info["lower_bound_s"] == pytest.approx(3e-3)
    assert info["bound_ratio"] == pytest.approx(3.125 / 3)


def test_an_early_copy_of_a_partial_does_not_let_the_replay_run_ahead():
    """y gets a copy of w's partial at once, then the real values; it sends on the sum
    only after the last copy (a copy of a reduced chunk replaces what is held). Were any
    copy enough, the sum would reach v after 10 ms — before u's data could (1 + 10 ms)."""
    def both(a: str, b: str, latency: float) -> list[Link]:
        return [Link(a, b, 1e12, latency), Link(b, a, 1e12, latency)]

    topo = Topology.build("junk", [Node(n) for n in "uwyv"],
                          both("u", "y", 1e-3) + both("w", "y", 0.0) + both("y", "v", 1e-2))
    coll = Collective(K.ALLREDUCE, 4, (0, 1, 2, 3))
    moves = [t for c in range(4) for t in (
        Transfer(c, "y", "w", 0, 1, "reduce"), Transfer(c, "w", "y", 0, 1),  # the early copy
        Transfer(c, "u", "y", 0, 11), Transfer(c, "y", "w", 11, 12, "reduce"),
        Transfer(c, "v", "y", 0, 101), Transfer(c, "y", "w", 101, 102, "reduce"),
        Transfer(c, "w", "y", 102, 103), Transfer(c, "y", "u", 103, 114),
        Transfer(c, "y", "v", 103, 204))]
    s = Schedule(topo, coll, 1e-4, tuple(moves))
    assert check_schedule(s) == []
    bound = lower_bound(topo, coll)
    assert bound.argument == "alpha_s" and bound.seconds == pytest.approx(11e-3)
    assert simulate_schedule(s).finish_time_s >= bound.seconds


def _bfs_tree(topology: Topology, root: str, ends: set[str], inward: bool,
              allowed: set[str]) -> dict[str, str]:
    """Each node's next hop toward ``root`` (inward) or its parent from it, on shortest
    paths through ``allowed`` nodes, pruned to what reaches ``ends``."""
    step, queue = {root: root}, deque([root])
    while queue:
        u = queue.popleft()
        near = ([k.src for k in topology.in_links(u)] if inward else
                [k.dst for k in topology.out_links(u)])
        for v in near:
            if v in allowed and v not in step:
                step[v] = u
                queue.append(v)
    kept: dict[str, str] = {}
    for v in ends:
        while v != root and v not in kept:
            kept[v] = step[v]
            v = step[v]
    return kept


class _Links:
    """Epoch bookkeeping per link: one chunk at a time, busy ⌈C/(b·τ)⌉ epochs, arriving
    ⌈(C/b + α)/τ⌉ epochs after its start (the checker's rules, with one start per epoch)."""

    def __init__(self, topology: Topology, chunk_bytes: float, epoch_s: float) -> None:
        self.topology, self.c, self.tau = topology, chunk_bytes, epoch_s
        self.busy: dict[tuple[str, str], set[int]] = defaultdict(set)

    def send(self, src: str, dst: str, ready: int) -> tuple[int, int]:
        link = self.topology.link(src, dst)
        hold = math.ceil(self.c / (link.bandwidth_Bps * self.tau) - 1e-12)
        delay = max(1, math.ceil((self.c / link.bandwidth_Bps + link.latency_s) / self.tau
                                 - 1e-9))
        start = ready
        while any(t in self.busy[link.key] for t in range(start, start + max(hold, 1))):
            start += 1
        self.busy[link.key].update(range(start, start + max(hold, 1)))
        return start, start + delay


def tree_schedule(topology: Topology, coll: Collective, meet: list[str]) -> Schedule:
    """Each chunk summed along a shortest-path in-tree to ``meet[i]`` (a source for
    copied chunks, any GPU for AllReduce, the destination for the other reductions),
    then copied along a shortest-path out-tree from it to its destinations; transfers as
    early as their data and links allow, over GPUs only."""
    gpus = set(topology.gpus)
    epoch = coll.chunk_bytes / max(k.bandwidth_Bps for k in topology.links)
    links, moves = _Links(topology, coll.chunk_bytes, epoch), []
    for chunk, x in zip(coll.chunks(), meet, strict=True):
        sources = {topology.gpu(r) for r in chunk.sources} - {x}
        wanted = {topology.gpu(r) for r in chunk.destinations} - {x}
        arrive: dict[str, int] = defaultdict(int)
        if chunk.reduce:
            up = _bfs_tree(topology, x, sources, True, gpus)
            depth = {v: _depth(v, up, x) for v in up}
            for v in sorted(up, key=lambda v: -depth[v]):
                start, end = links.send(v, up[v], arrive[v])
                moves.append(Transfer(chunk.id, v, up[v], start, end, "reduce"))
                arrive[up[v]] = max(arrive[up[v]], end)
        down = _bfs_tree(topology, x, wanted, False, gpus)
        for v in sorted(down, key=lambda v: _depth(v, down, x)):
            start, end = links.send(down[v], v, arrive[down[v]])
            moves.append(Transfer(chunk.id, down[v], v, start, end))
            arrive[v] = end
    return Schedule(topology, coll, epoch, tuple(moves))


def _depth(v: str, step: dict[str, str], root: str) -> int:
    d = 0
    while v != root:
        v, d = step[v], d + 1
    return d


def meeting_points(topology: Topology, coll: Collective, data) -> list[str]:
    """Where each chunk's tree turns: its source, its destination, or for AllReduce any
    GPU (a GPU outside the collective too)."""
    out = []
    for chunk in coll.chunks():
        if coll.kind is K.ALLREDUCE:
            out.append(data.draw(st.sampled_from(topology.gpus)))
        elif chunk.reduce:
            out.append(topology.gpu(chunk.destinations[0]))
        else:
            out.append(topology.gpu(chunk.sources[0]))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(), st.integers(1, 4), st.data())
def test_no_checked_tree_schedule_beats_the_bound(topo, chunks, data):
    kinds = ["allreduce", "allreduce", "broadcast", "reduce", "allgather", "reducescatter",
             "gather", "scatter"]
    coll = data.draw(collectives(topo, kinds, chunks))
    s = tree_schedule(topo, coll, meeting_points(topo, coll, data))
    assert check_schedule(s) == []
    bound = lower_bound(topo, coll).seconds
    sim = simulate_schedule(s)
    assert s.finish_time_s >= bound * (1 - 1e-9)
    assert sim.finish_time_s >= bound * (1 - 1e-9)
    assert sim_summary(topo, coll, sim)["bound_ratio"] >= 1 - 1e-9


def test_the_line_schedules_msccl_xml_replays_above_its_bound(tmp_path, teccl):
    """The number docs/model.md quotes is the lowered file's replay, as the runtime runs it."""
    from te_ccl.lower.msccl import lower_to_msccl

    topo = tmp_path / "line3.yaml"
    topo.write_text("generator: {kind: mesh, dims: [3], bandwidth: 1GB/s}\n")
    xml = tmp_path / "line.xml"
    xml.write_bytes(lower_to_msccl(line_schedule()))
    assert teccl("verify", str(xml))[0] == 0
    code, out, _ = teccl("simulate", str(topo), str(xml), "--size", "3MB", "--json")
    info = json.loads(out)
    assert code == 0 and info["finish_time_s"] == pytest.approx(3.125e-3)
    assert info["bound_ratio"] == pytest.approx(3.125 / 3)
