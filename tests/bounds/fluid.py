"""The fluid optimum of a collective over tree schedules, by brute force and GLOP: written
apart from :mod:`te_ccl.bounds`, to compare its bounds with.

Every piece of data travels along a tree: copies along out-trees from their source
(branching only where a node can copy), partial sums along in-trees to their destination
(branching only where a node can add), an AllReduce element along an in-tree to some node
``x`` and an out-tree from it. A tree's edges may pass through switches, which forward
what they receive (one switch may carry several edges of a tree). The LP packs trees at rates so that every link carries at
most ``b·T`` bytes, and minimises ``T``. With chunks cut fine enough, pipelined tree
schedules approach it (α aside), so no valid bandwidth bound may exceed it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ortools.linear_solver import pywraplp

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.topology import Node, Topology

Tree = tuple[tuple[str, str], ...]  # its links, sorted, a link once per use


def can_copy(node: Node) -> bool:
    return node.is_gpu or node.can_copy


def can_add(node: Node) -> bool:
    return node.is_gpu or node.can_reduce


def hops(topology: Topology) -> dict[tuple[str, str], list[Tree]]:
    """The ways from one node to another that pass only through switches (which forward
    what they receive): the edges trees are made of."""
    out: dict[tuple[str, str], list[Tree]] = {}
    switches = set(topology.switches)

    def walk(start: str, node: str, path: list[tuple[str, str]], seen: set[str]) -> None:
        for link in topology.out_links(node):
            if link.dst in seen:
                continue
            step = path + [link.key]
            out.setdefault((start, link.dst), []).append(tuple(step))
            if link.dst in switches:
                walk(start, link.dst, step, seen | {link.dst})

    for n in topology.nodes:
        walk(n.name, n.name, [], {n.name})
    return out


def trees(topology: Topology, root: str, terminals: set[str], *, inward: bool) -> list[Tree]:
    """Every tree joining ``root`` and ``terminals``, out of the root or, with ``inward``,
    into it; its edges are :func:`hops`. A node that is not a terminal is in it only to
    pass data on, and a node with several children must copy (out) or add (in)."""
    ways = hops(topology)
    spare = [n.name for n in topology.nodes if n.name != root and n.name not in terminals]
    found: set[Tree] = set()
    for r in range(len(spare) + 1):
        for extra in itertools.combinations(spare, r):
            found.update(_spanning(topology, ways, root, set(terminals) | set(extra),
                                   set(extra), inward))
    return sorted(found)


def _spanning(topology: Topology, ways: dict[tuple[str, str], list[Tree]], root: str,
              nodes: set[str], relays: set[str], inward: bool) -> Iterator[Tree]:
    others = sorted(nodes - {root})
    nodes = nodes | {root}
    options = [[(p, way) for p in sorted(nodes) if p != v
                for way in ways.get((v, p) if inward else (p, v), [])] for v in others]
    able = can_add if inward else can_copy
    for choice in itertools.product(*options):
        parent = {v: p for v, (p, _) in zip(others, choice, strict=True)}
        if not all(_reaches(v, parent, root) for v in others):
            continue
        children: dict[str, int] = {}
        for p in parent.values():
            children[p] = children.get(p, 0) + 1
        if any(n > 1 and not able(topology.node(p)) for p, n in children.items()):
            continue
        if any(v not in children for v in relays):  # a relay that passes nothing on
            continue
        yield tuple(sorted(key for _, way in choice for key in way))


def _reaches(v: str, parent: dict[str, str], root: str) -> bool:
    seen = set()
    while v != root:
        if v in seen:
            return False
        seen.add(v)
        v = parent[v]
    return True


def fluid_optimum(topology: Topology, collective: Collective) -> float:
    """The least time in which tree schedules move ``collective`` (seconds; α ignored)."""
    K = CollectiveKind
    kind, size = collective.kind, float(collective.size_bytes)
    members = [topology.gpu(r) for r in collective.ranks]
    n = len(members)
    root = topology.gpu(collective.root) if collective.root is not None else None
    lp = pywraplp.Solver.CreateSolver("GLOP")
    T = lp.NumVar(0, lp.infinity(), "T")
    load: dict[tuple[str, str], list] = {k.key: [] for k in topology.links}

    def pack(options: list[Tree]) -> list:
        rates = [lp.NumVar(0, lp.infinity(), "") for _ in options]
        for rate, tree in zip(rates, options, strict=True):
            for key in tree:
                load[key].append(rate)
        return rates

    def demand(options: list[Tree], amount: float) -> None:
        lp.Add(sum(pack(options)) == amount)

    if kind is K.ALLGATHER:
        for u in members:
            demand(trees(topology, u, set(members) - {u}, inward=False), size / n)
    elif kind is K.BROADCAST:
        demand(trees(topology, root, set(members) - {root}, inward=False), size)
    elif kind is K.REDUCESCATTER:
        for v in members:
            demand(trees(topology, v, set(members) - {v}, inward=True), size / n)
    elif kind is K.REDUCE:
        demand(trees(topology, root, set(members) - {root}, inward=True), size)
    elif kind is K.GATHER:
        for u in set(members) - {root}:
            demand(trees(topology, root, {u}, inward=True), size / n)
    elif kind is K.SCATTER:
        for v in set(members) - {root}:
            demand(trees(topology, root, {v}, inward=False), size / n)
    elif kind is K.ALLTOALL:
        for u, v in itertools.permutations(members, 2):
            demand(trees(topology, u, {v}, inward=False), size / n)
    elif kind is K.ALLREDUCE:
        total = []
        for node in topology.nodes:
            x = node.name
            up = pack(trees(topology, x, set(members) - {x}, inward=True))
            down = pack(trees(topology, x, set(members) - {x}, inward=False))
            if not up or not down:
                continue
            lp.Add(sum(up) == sum(down))
            total += up
        lp.Add(sum(total) == size)
    else:
        raise ValueError(f"no tree model for {kind.value}")
    scale = max(k.bandwidth_Bps for k in topology.links)
    for k in topology.links:
        lp.Add(sum(load[k.key]) <= k.bandwidth_Bps / scale * T)
    lp.Minimize(T)
    status = lp.Solve()
    assert status == pywraplp.Solver.OPTIMAL, status
    return T.solution_value() / scale
