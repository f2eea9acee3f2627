"""Broadcast trees packed to the cut bound, each chunk pipelined down one of them.

When every chunk goes from one source to every other GPU (AllGather; the scale backend
keeps the greedy for reductions, see :func:`~te_ccl.backends.scale.entry.solve_moves`),
the best rate is a packing of spanning
arborescences (Edmonds: a source can broadcast at its min-cut rate, and the sources share
the links). The linear program "max ``x``: every source ``s`` broadcasts ``D_s·x`` over
trees rooted at ``s``, no link over its bandwidth" is solved by column generation (GLOP for
the master, a minimum arborescence per source with the link duals as weights for the
pricing); its optimum is the fluid time ``1/x``, the cut bound where the cuts are each
GPU's in-links. A second round keeps that rate and shifts the weight to shallow trees
(:func:`pack_trees`). Each source's chunks are split over its trees near their weights
(moves of single chunks even out the busiest link, :func:`_split`) and the greedy
(:func:`~te_ccl.backends.scale.greedy.greedy_transfers`) times them: each link prefers the
chunks whose tree it is on, then those with the deepest subtree still to reach, then the
oldest; when none of its tree's chunks is there yet (the pipelines' fill and drain) it
sends any chunk its far end still needs rather than idle.

The greedy alone picks routes epoch by epoch and lands a few per cent off on irregular
fabrics: DGX-1's hybrid cube-mesh with its doubled NVLinks, AllGather 1 GB at 86 chunks
per GPU, replays at 1.047× the cut bound by the greedy's routes and 1.007× along the
trees (``teccl compile dgx1 -c allgather -s 1GB``). Up to :data:`MAX_GPUS` GPUs.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.model.problem import build_problem
>>> from te_ccl.spec.topology import load_topology
>>> dgx1 = load_topology("dgx1")
>>> p = build_problem(dgx1, Collective(CollectiveKind.ALLGATHER, 10**9, tuple(range(8))))
>>> packing = pack_trees(p)
>>> round(packing.seconds * 1e3, 4)  # 7/8 GB over 6 NVLinks of 25 GB/s: the cut bound (ms)
5.8333
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from te_ccl.backends.scale import bitsets
from te_ccl.backends.scale.greedy import greedy_transfers, net_of
from te_ccl.backends.scale.moves import Moves
from te_ccl.deadline import Budget, check, checked
from te_ccl.errors import SolverError
from te_ccl.model.problem import Problem

__all__ = ["MAX_GPUS", "Packing", "pack_trees", "solve_trees", "spanning_demands"]

PACKING = "packing broadcast trees"  # what a deadline reached interrupted

MAX_GPUS = 16  # beyond, the greedy's own routes land within ~1.5% (mesh/torus 8×8)
_KEEP = 1e-6  # of the best rate, given up for shallower trees
_MAX_ROUNDS = 200  # column generation rounds (dgx1 needs ~30)
_EPS = 1e-9

Edge = tuple[str, str]


@dataclass(frozen=True)
class Packing:
    """Trees per source, each ``(weight, edges)`` (weights in chunks per second), and the
    fluid time of all demands at those rates."""

    trees: dict[str, tuple[tuple[float, frozenset[Edge]], ...]]
    seconds: float


def spanning_demands(problem: Problem) -> dict[str, list[int]] | None:
    """Chunks per source when every demand is one source to every other GPU of a
    GPU-only network and every GPU is a source, else None.

    A lone source (Broadcast) has no other sources' chunks to fill its trees' start and
    end: on a ring its two trees are paths of every GPU, and the greedy's own routes do
    better (ring8 Broadcast 1 GB: 1.22× against 1.33× the bound)."""
    topo = problem.topology
    own = {(d.chunk, s) for d in problem.demands for s in d.sources}
    if topo.switches or problem.relay_limit or not problem.state.held <= own:
        return None
    nodes = {n.name for n in topo.nodes}
    linked = {u for u, _ in problem.timings} | {v for _, v in problem.timings}
    if linked != nodes:
        return None
    out: dict[str, list[int]] = defaultdict(list)
    for d in problem.demands:
        if len(d.sources) != 1 or set(d.destinations) | {d.sources[0]} != nodes:
            return None
        out[d.sources[0]].append(d.chunk)
    return dict(out) if set(out) == nodes else None


def _arborescence(weight: dict[Edge, float], nodes: list, root) -> tuple[float, frozenset[Edge]]:
    """The minimum-weight spanning arborescence rooted at ``root`` (Chu–Liu/Edmonds: each
    node's cheapest in-edge; a cycle among them is contracted and solved again).

    >>> w = {("r", "a"): 5, ("r", "b"): 1, ("b", "a"): 1, ("a", "b"): 1}
    >>> cost, edges = _arborescence(w, ["r", "a", "b"], "r")
    >>> cost, sorted(edges)
    (2, [('b', 'a'), ('r', 'b')])
    """
    best: dict = {}
    for (u, v), w in weight.items():
        if v != root and u != v and (v not in best or w < weight[best[v]]):
            best[v] = (u, v)
    if len(best) < len(nodes) - 1:
        raise SolverError("tree packing: a GPU cannot be reached")
    cycle = _cycle(best)
    if cycle is None:
        return sum(weight[e] for e in best.values()), frozenset(best.values())
    merged = ("cycle", len(nodes))
    origin: dict = {}  # contracted edge → the original edge it stands for
    inner: dict = {}
    for (u, v), w in weight.items():
        key = (merged if u in cycle else u, merged if v in cycle else v)
        if key[0] == key[1]:
            continue
        w -= weight[best[v]] if v in cycle else 0
        if key not in inner or w < inner[key]:
            inner[key], origin[key] = w, (u, v)
    _, edges = _arborescence(inner, [n for n in nodes if n not in cycle] + [merged], root)
    out = {origin[e] for e in edges}
    entered = next(v for u, v in out if v in cycle)
    out |= {best[v] for v in cycle if v != entered}
    return sum(weight[e] for e in out), frozenset(out)


def _cycle(parent_edge: dict) -> set | None:
    """The nodes of a cycle among the chosen in-edges, if any."""
    done: set = set()
    for start in parent_edge:
        path, v = [], start
        while v in parent_edge and v not in done and v not in path:
            path.append(v)
            v = parent_edge[v][0]
        if v in path:
            return set(path[path.index(v):])
        done.update(path)
    return None


def pack_trees(problem: Problem) -> Packing:
    """The tree packing of the module docstring for ``problem``'s sources.

    Two rounds of column generation: the first finds the best rate ``x``; the second
    keeps it and moves the weight to shallow trees (it minimises the links each tree
    takes sideways or back from its root's BFS layers, :func:`_detours`): a deep tree
    delays its last chunk by its depth in hops, and over a few dozen chunks per tree
    that fill costs a few per cent.

    Raises SolverError when the problem is not spanning single-source broadcasts on
    GPUs, or the LP fails.
    """
    from ortools.linear_solver import pywraplp

    sources = spanning_demands(problem)
    if sources is None:
        raise SolverError("tree packing needs every chunk sent from one GPU to all others")
    chunk = problem.chunk_bytes
    nodes = sorted({u for u, _ in problem.timings} | {v for _, v in problem.timings})
    detours = _detours(problem.timings, sources)
    lp = pywraplp.Solver.CreateSolver("GLOP")
    x = lp.NumVar(0, lp.infinity(), "x")
    by_source = {s: lp.Constraint(-lp.infinity(), 0) for s in sources}  # D_s·x ≤ Σ w
    for s, row in by_source.items():
        row.SetCoefficient(x, len(sources[s]))
    by_edge = {e: lp.Constraint(-lp.infinity(), lt.link.bandwidth_Bps / chunk)  # chunks/s
               for e, lt in problem.timings.items()}
    objective = lp.Objective()
    objective.SetMaximization()
    columns: list[tuple[str, frozenset[Edge], pywraplp.Variable]] = []

    def add(s: str, edges: frozenset[Edge], shallow: bool) -> None:
        var = lp.NumVar(0, lp.infinity(), f"w{len(columns)}")
        by_source[s].SetCoefficient(var, -1)
        for e in edges:
            by_edge[e].SetCoefficient(var, 1)
        columns.append((s, edges, var))
        if shallow:
            objective.SetCoefficient(var, -sum(detours[s][e] for e in edges))

    def generate(shallow: bool) -> None:
        """Solve, price a tree per source with the link duals (plus the detours when
        ``shallow``) as weights, add those that pay; until none does."""
        for _ in range(_MAX_ROUNDS):
            check(PACKING)
            if lp.Solve() != pywraplp.Solver.OPTIMAL or x.solution_value() <= 0:
                raise SolverError("tree packing: the LP found no rate")
            duals = {e: max(0.0, row.dual_value()) for e, row in by_edge.items()}
            new = []
            for s, row in by_source.items():
                weight = ({e: d + detours[s][e] for e, d in duals.items()} if shallow
                          else duals)
                cost, edges = _arborescence(weight, nodes, s)
                if cost < row.dual_value() - _EPS * max(1.0, abs(row.dual_value())):
                    new.append((s, edges))
            if not new:
                return
            for s, edges in new:
                add(s, edges, shallow)

    for s in sources:  # a start: the shallowest tree per source
        add(s, _arborescence(detours[s], nodes, s)[1], False)
    objective.SetCoefficient(x, 1)
    generate(False)
    best = x.solution_value()
    x.SetLb(best * (1 - _KEEP))
    objective.SetCoefficient(x, 0)
    for s, edges, var in columns:
        objective.SetCoefficient(var, -sum(detours[s][e] for e in edges))
    generate(True)
    trees: dict[str, list[tuple[float, frozenset[Edge]]]] = defaultdict(list)
    for s, edges, var in columns:
        if var.solution_value() > _EPS:
            trees[s].append((var.solution_value(), edges))
    return Packing({s: tuple(ts) for s, ts in trees.items()}, 1 / x.solution_value())


def _detours(links, sources) -> dict[str, dict[Edge, int]]:
    """Per source and link ``u → v``: ``hops(u) + 1 − hops(v)`` from the source, 0 for a
    link that goes one BFS layer further, more for one that goes sideways or back."""
    graph = nx.DiGraph(list(links))
    out = {}
    for s in sources:
        hops = nx.single_source_shortest_path_length(graph, s)
        out[s] = {(u, v): hops[u] + 1 - hops[v] for u, v in links}
    return out


def _split(problem: Problem, packing: Packing, sources: dict[str, list[int]]
           ) -> dict[str, list[int]]:
    """Chunks per tree of each source: the largest remainders of the trees' weights, then
    single chunks moved between trees of one source while that unloads a busiest link
    (in epochs) without loading another as much: rounding each source's split alone can
    load one link a few chunks over its share (dgx1 AllGather at 100 chunks per GPU:
    1.2% over the fluid time)."""
    cost = {e: lt.occupancy / lt.capacity for e, lt in problem.timings.items()}
    counts: dict[str, list[int]] = {}
    load: dict[Edge, float] = dict.fromkeys(cost, 0.0)
    for s, trees in packing.trees.items():
        n, total = len(sources[s]), sum(w for w, _ in trees)
        exact = [n * w / total for w, _ in trees]
        counts[s] = [int(e) for e in exact]
        for i in sorted(range(len(trees)), key=lambda i: counts[s][i] - exact[i])[
                :n - sum(counts[s])]:
            counts[s][i] += 1
        for c, (_, edges) in zip(counts[s], trees, strict=True):
            for e in edges:
                load[e] += c * cost[e]
    for _ in checked(range(sum(len(cs) for cs in sources.values())), PACKING, every=64):
        top = max(load.values())
        busiest = {e for e, x in load.items() if x >= top - _EPS}
        move = next(((s, i, j, ej - ei) for s, trees in packing.trees.items()
                     for i, (_, ei) in enumerate(trees) if counts[s][i] and busiest & ei
                     for j, (_, ej) in enumerate(trees)
                     if not busiest & ei & ej
                     and all(load[e] + cost[e] < top - _EPS for e in ej - ei)), None)
        if move is None:
            break
        s, i, j, _ = move
        counts[s][i] -= 1
        counts[s][j] += 1
        for e in packing.trees[s][i][1]:
            load[e] -= cost[e]
        for e in packing.trees[s][j][1]:
            load[e] += cost[e]
    return counts


def _interleave(counts: list[int]) -> list[int]:
    """Tree indices for a source's chunks in order, each tree evenly spread (smooth
    weighted round robin), so every tree's pipeline starts at once."""
    total, credit, out = sum(counts), [0] * len(counts), []
    for _ in range(total):
        for i, c in enumerate(counts):
            credit[i] += c
        i = max(range(len(counts)), key=lambda i: credit[i])
        credit[i] -= total
        out.append(i)
    return out


def _heights(edges: frozenset[Edge]) -> dict[str, int]:
    """Per node of a tree the hops from it to its deepest descendant."""
    tree = nx.DiGraph(list(edges))
    height: dict[str, int] = {}
    for v in reversed(list(nx.topological_sort(tree))):
        height[v] = 1 + max((height[w] for w in tree[v]), default=-1)
    return height


def solve_trees(problem: Problem, budget: Budget) -> tuple[Moves, tuple[str, ...]] | None:
    """(moves, notes) along packed trees when the problem is spanning broadcasts on at
    most :data:`MAX_GPUS` GPUs, else None.

    Each link prefers, in turn: a chunk whose tree it is on (else any chunk its far end
    still needs: the start and the end of the pipelines leave links free), one whose
    subtree below the far end is the deepest, the oldest.
    """
    sources = spanning_demands(problem)
    if sources is None or len(problem.topology.nodes) > MAX_GPUS:
        return None
    packing = pack_trees(problem)
    net = net_of(problem)
    link = net.link_index()
    # chunk order: the j-th chunk of every source before the (j+1)-th of any
    order = [c for _, _, c in sorted((j, s, c) for s, cs in sources.items()
                                     for j, c in enumerate(sorted(cs)))]
    bit = {c: b for b, c in enumerate(order)}
    counts = _split(problem, packing, sources)
    on_tree: tuple[list[int], list[int]] = ([], [])
    by_height: dict[int, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for s, cs in checked(sources.items(), PACKING, every=1):
        trees = packing.trees[s]
        heights = [_heights(edges) for _, edges in trees]
        for c, t in zip(sorted(cs), _interleave(counts[s]), strict=True):
            for e in trees[t][1]:
                for rows, cols in (on_tree, by_height[heights[t][e[1]]]):
                    rows.append(link[e])
                    cols.append(bit[c])
    tiers = tuple(bitsets.from_pairs(len(net.src), len(order), *by_height[h])
                  for h in sorted(by_height, reverse=True))
    moves = greedy_transfers(problem, order, deadline=lambda: budget.spent,
                             prefer=(bitsets.from_pairs(len(net.src), len(order), *on_tree),),
                             tiers=tiers)
    ntrees = sum(len(ts) for ts in packing.trees.values())
    note = (f"{ntrees} broadcast trees packed by LP (fluid time {packing.seconds:.4g} s); "
            "each chunk down one of them, oldest first")
    return moves, (note,)
