"""Relay buffers: what counts against a GPU's limit, in the model, before it and in auto."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.errors import SolverError
from te_ccl.model import build_problem, formulate
from te_ccl.model.relays import forced_relays, relay_overflow
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.schedule_check import check_schedule


def one_way_ring(g3_buffer: int | None, *, uneven: bool = True) -> Topology:
    """g0 → g1 → g2 → g3 → g0: every chunk between two other GPUs that crosses g3 must."""
    bw = (1e9, 5e8, 2e9, 1e9) if uneven else (1e9,) * 4
    lat = (1e-7, 1e-7, 1e-7, 0.0) if uneven else (0.0,) * 4
    nodes = [Node("g0"), Node("g1"), Node("g2"), Node("g3", buffer_bytes=g3_buffer)]
    return Topology.build("r", nodes, [Link(f"g{i}", f"g{(i + 1) % 4}", bw[i], lat[i])
                                       for i in range(4)])


def alltoall(chunks: int) -> Collective:
    return Collective(CollectiveKind.ALLTOALL, 4000 * chunks, (0, 1, 2, 3), chunks)


def _through_g3(coll: Collective) -> set[int]:
    """Chunks g3 relays on the one-way ring: from g1 or g2 to a GPU g3 comes before."""
    return {c.id for c in coll.chunks()
            if 3 not in c.sources + c.destinations and c.destinations[0] < c.sources[0]}


def test_the_model_counts_every_relayed_chunk_once_against_the_limit():
    coll = alltoall(2)
    p = build_problem(one_way_ring(4000), coll)
    assert p.relay_limit == {"g3": 4}
    budget = [r for r in formulate(p, 12).rows
              if r[0] and all(k[0] == "r" for k, _ in r[0])]
    (terms, lo, hi), reserved = budget  # every relay, then those g3 is not forced to make
    counted = [k[1] for k, _ in terms]
    # each chunk that may pass g3 once, whether or not it moves on; what g3 sends or wants
    # is free
    assert len(counted) == len(set(counted)) and set(counted) >= _through_g3(coll)
    assert not any(3 in coll.chunks()[c].sources + coll.chunks()[c].destinations
                   for c in counted)
    assert (lo, hi) == (None, 4)
    forced = _through_g3(coll)  # they keep their slots: the others get what is left
    assert {k[1] for k, _ in reserved[0]} == set(counted) - forced
    assert reserved[1:] == (None, 4 - len(forced))


def test_forced_relays_are_the_chunks_no_route_avoids():
    coll = alltoall(2)
    assert forced_relays(build_problem(one_way_ring(4000), coll)) == {"g3": _through_g3(coll)}
    both_ways = Topology.build("b", one_way_ring(4000).nodes, [
        Link(f"g{a}", f"g{b}", 1e9) for i in range(4)
        for a, b in ((i, (i + 1) % 4), ((i + 1) % 4, i))])
    assert forced_relays(build_problem(both_ways, coll)) == {}


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 5).flatmap(lambda n: st.sets(
    st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda e: e[0] != e[1]),
    min_size=n).map(lambda edges: (n, edges))))
def test_forced_relays_match_cutting_each_gpu_out(net):
    n, edges = net
    topo = Topology.build("g", [Node(f"g{i}", buffer_bytes=0) for i in range(n)],
                          [Link(f"g{a}", f"g{b}", 1e9) for a, b in sorted(edges)])
    coll = Collective(CollectiveKind.ALLTOALL, n * n * 1000, tuple(range(n)))
    graph = topo.graph()
    expected: dict[str, set[int]] = {}
    for v in topo.gpus:
        cut = graph.copy()
        cut.remove_node(v)
        for c in coll.chunks():
            (s,), (d,) = c.sources, c.destinations
            a, b = topo.gpu(s), topo.gpu(d)
            if v not in (a, b) and nx.has_path(graph, a, b) and not nx.has_path(cut, a, b):
                expected.setdefault(v, set()).add(c.id)
    assert forced_relays(build_problem(topo, coll)) == expected


def test_relay_overflow_counts_distinct_chunks_a_gpu_neither_owns_nor_wants():
    coll = alltoall(1)
    topo = one_way_ring(1000, uneven=False)
    ids = {(c.sources[0], c.destinations[0]): c.id for c in coll.chunks()}
    relayed, to_g3 = ids[(2, 0)], ids[(2, 3)]
    moves = (Transfer(relayed, "g2", "g3", 0, 1), Transfer(relayed, "g2", "g3", 1, 2),
             Transfer(to_g3, "g2", "g3", 2, 3))
    assert relay_overflow(Schedule(topo, coll, 1e-6, moves)) is None
    moves += (Transfer(ids[(1, 0)], "g2", "g3", 3, 4),)
    assert relay_overflow(Schedule(topo, coll, 1e-6, moves)) == (
        "g3 relays 2 chunk(s) (2000 bytes) over its buffer limit of 1000 bytes")


@pytest.mark.parametrize("backend", ["milp", "lp", "rounds", "auto"])
def test_a_gpu_that_must_relay_more_than_its_buffer_makes_every_backend_refuse(backend):
    # six chunks (6000 bytes) can only pass g3, which holds 4000: a ring template would
    # still deliver them, with 6000 bytes of scratch at g3
    topo, coll = one_way_ring(4000), alltoall(2)
    with pytest.raises(SolverError, match=r"infeasible: 6 chunk\(s\) of 1000 bytes reach "
                                          r"their destinations only through g3"):
        solve(topo, coll, SolveParams(backend=backend, time_limit_s=10))
    cut = topo.graph()
    cut.remove_node("g3")
    cut_off = {c.id for c in coll.chunks() if 3 not in c.sources + c.destinations
               and not nx.has_path(cut, topo.gpu(c.sources[0]), topo.gpu(c.destinations[0]))}
    assert len(cut_off) * coll.chunk_bytes > 4000


@pytest.mark.parametrize("backend", ["lp", "rounds"])
def test_a_buffer_that_holds_the_forced_relays_is_met(backend):
    topo, coll = one_way_ring(6000), alltoall(2)
    s = solve(topo, coll, SolveParams(backend=backend, time_limit_s=10))
    assert check_schedule(s) == []
    assert {t.chunk for t in s.transfers if t.dst == "g3"} - {
        c.id for c in coll.chunks() if 3 in c.destinations} == _through_g3(coll)


@pytest.mark.parametrize("backend", ["milp", "lp", "rounds", "auto"])
def test_every_backend_keeps_a_buffer_limit_met_exactly(backend):
    # one chunk per rank: three must pass g3, whose buffer holds exactly three
    topo, coll = one_way_ring(3000, uneven=False), alltoall(1)
    s = solve(topo, coll, SolveParams(backend=backend, time_limit_s=10))
    assert check_schedule(s) == []


def test_rounds_keep_the_slots_of_forced_relays_and_route_around_a_full_buffer():
    """g1 is reached only through g0, whose buffer holds 4 relays: the 4 chunks from g2
    and g3 to g1. A round used to spend those slots on chunks with other routes (g0 then
    relayed 6), and once g0's buffer was full, chunks whose shortest route crossed it never
    moved. Chunks under way at a round's end count against the buffer too."""
    nodes = [Node("g0", buffer_bytes=4000), Node("g1", buffer_bytes=4000), Node("g2"),
             Node("g3"), Node("sw", NodeKind.SWITCH, can_reduce=True)]
    links = [Link("g0", "g1", 6.5e9), Link("g1", "g2", 1e9), Link("g2", "g3", 1e9),
             Link("g3", "g0", 1e9, 2e-6), Link("g0", "g3", 3e9), Link("g1", "g0", 1e9)]
    for g in ("g0", "g2", "g3"):
        links += [Link(g, "sw", 2e9, 1e-7), Link("sw", g, 2e9, 1e-7)]
    s = solve(Topology.build("t", nodes, links), alltoall(2),
              SolveParams(backend="rounds", time_limit_s=600))  # ends at once
    assert check_schedule(s) == []
