"""Packed pipelined trees and flow paths: rooted collectives and AllReduce at the link rate.

NCCL broadcasts along a pipelined chain: the root streams small pieces and every GPU
forwards each piece while the next comes in, so the collective runs at the rate of the
slowest link of the chain, not of the root's fan-out. Where one chain or tree cannot use
every link (a root with several links, boxes joined by rails), several trees share the
data. This template picks them by a linear program and cuts the collective into many
pieces so that the pipelines' fill and drain costs little.

The GPUs are joined by an *overlay*: GPU ``u`` reaches GPU ``v`` where its send (the
direct link or the fastest path) passes switches only (an MSCCL send goes to one peer: a
switch does not copy, and a reduced partial must not pass another GPU). An AllReduce tree
joins only GPUs whose routes pass no switch that keeps what it sums: a second partial of
the chunk reduced through it would be added to the first. Routes share physical links,
so the LP counts every route of a tree on the links it crosses:

* **Broadcast / AllReduce** (Reduce is the Broadcast of the reversed fabric played
  backwards, as the flow model solves it): maximise the total rate ``Σ w_T`` of trees ``T``
  with no link over its bandwidth, by column generation (GLOP for the master; the pricing
  is a minimum arborescence out of the root for Broadcast and a minimum spanning tree whose edges carry the partial up and the sum back down for
  AllReduce, each edge weighed by the link duals along its routes). An AllReduce tree is
  rooted at its centre, where its pieces are summed: reduce along the tree, broadcast
  back (on three GPUs in a line, the middle one sums and sends back, where ReduceScatter
  + AllGather moves a third more over the middle links).
* **Gather / Scatter**: one commodity flows from every GPU into the root (out of it for
  Scatter); the LP minimises the time with every link within its bandwidth, and the flow
  is cut into paths, each GPU's pieces split over its paths by their flow.

Pieces are given to trees or paths by their weights (largest remainder) and timed by
:func:`~te_ccl.baselines.plan.assemble`, which pipelines them.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from dataclasses import replace

import networkx as nx

from te_ccl.backends.scale.msccl_budget import room
from te_ccl.baselines.plan import TEMPLATE, BaselineError, ChunkPlan, assemble, route
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import checked
from te_ccl.model.extract import reverse_in_time
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["PACKED_KINDS", "backwards", "min_arborescence", "packed", "packed_as_cut",
           "packed_fine", "overlay", "waited_floor"]

PACKED_KINDS = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE, CollectiveKind.ALLREDUCE,
                CollectiveKind.GATHER, CollectiveKind.SCATTER)
PIECES = 384  # pieces the collective is cut into at most (fewer where the runtime's
#               element limit per rank would not hold their steps)
FLOW_PIECES = 256  # the same for Gather and Scatter: all pieces cross the root's links,
#                   and 384 into one root broke the lowering's channel rules (hgx-h100x2)
FINE_PIECES = 1024  # both for packed_fine: a tree or path fills a hop per piece, so more
#                     pieces fill faster (dgx1 Broadcast 64 MB: 1.19x the bound at 384,
#                     1.11x at 1024; dgx2x2 Scatter 1.16x at 256, 1.06x at 1024), but a
#                     rank with many peers may need more thread blocks than the runtime can
#                     wait for (dgx2x2 Broadcast at 800, aws-p4dx2 at 576)
MIN_PIECE_BYTES = 8192  # below, a piece's time is a small part of a hop's α: cutting it
#                         finer only adds steps
_ROUNDS = 60  # column generation rounds
_SEED_ROUNDS = 40  # multiplicative-weight rounds for the first trees
_GROWTH = 0.5  # how much a fully loaded link's price grows in one of them
_SEED_GAIN = 0.02  # the seeded trees must reach this much more rate to be kept
_HOP = 1e-6  # times a link's time per byte, added to its price: ties go to shorter trees
_SLACK = 1e-3  # of the highest rate, given up for trees that leave more slack
_TIME = 1e-3  # weight of the link time against the slack in the second LP
_BUSY = 0.9  # share of the time beyond which the second LP counts a link as too busy
_EPS = 1e-7

Link = tuple[str, str]
Routes = dict[Link, list[str]]
Tree = dict[str, str]  # node -> parent


def overlay(topology: Topology, gpus: list[str]) -> Routes:
    """For every ordered pair of ``gpus`` whose send takes no other GPU on the way: its
    route, the direct link or the fastest path (:func:`~te_ccl.baselines.plan.route`, the
    one the lowered file's replay takes too)."""
    graph = topology.graph()
    graph.remove_nodes_from(set(topology.gpus) - set(gpus))
    routes: Routes = {}
    for u in checked(gpus, TEMPLATE, every=1):  # a path search per pair: minutes at 1024
        for v in gpus:
            if u != v:
                path = route(topology, u, v, via_gpus=True, graph=graph)
                if all(not topology.node(x).is_gpu for x in path[1:-1]):
                    routes[(u, v)] = path
    return routes


def _hops(path: list[str]) -> list[Link]:
    return list(zip(path, path[1:], strict=False))


class _Net:
    """The overlay and the physical links' bandwidths (scaled to the largest), with link
    use per tree."""

    def __init__(self, topology: Topology, gpus: list[str]) -> None:
        self.gpus, self.routes = gpus, overlay(topology, gpus)
        self.scale = max(k.bandwidth_Bps for k in topology.links)
        self.bw = {(k.src, k.dst): k.bandwidth_Bps / self.scale for k in topology.links}
        self.keeps_sums = {n.name for n in topology.nodes
                           if not n.is_gpu and n.can_reduce and n.has_buffer}

    def sums_on_way(self, *pairs: Link) -> bool:
        """Whether a route of ``pairs`` crosses a switch that keeps what it sums: a second
        partial of the chunk reduced through it would be added to the first, and the sum
        sent on again."""
        return any(x in self.keeps_sums for p in pairs for x in self.routes[p][1:-1])

    def use(self, pairs: list[Link]) -> Counter[Link]:
        """Physical link → how many of the routes of ``pairs`` cross it."""
        return Counter(h for p in pairs for h in _hops(self.routes[p]))

    def cost(self, pair: Link, prices: dict[Link, float]) -> float:
        return sum(prices[h] for h in _hops(self.routes[pair]))

    def time(self, col: Counter[Link]) -> float:
        """Link time a unit of a tree's rate takes, summed over its links."""
        return sum(n / self.bw[h] for h, n in col.items())


def _pairs(kind: CollectiveKind, tree: Tree) -> list[Link]:
    """The routes a tree's pieces take: parent → child to copy (Broadcast), and for
    AllReduce child → parent to reduce too."""
    down = [(p, c) for c, p in tree.items()]
    return down if kind is CollectiveKind.BROADCAST else [(c, p) for c, p in tree.items()] + down


def _price(net: _Net, kind: CollectiveKind, root: str | None, prices: dict[Link, float]
           ) -> tuple[str, Tree]:
    """The cheapest tree when crossing a link costs its ``prices``, and its root."""
    if kind is CollectiveKind.ALLREDUCE:
        ug = nx.Graph()
        ug.add_nodes_from(net.gpus)
        for (u, v) in net.routes:
            if u < v and (v, u) in net.routes and not net.sums_on_way((u, v), (v, u)):
                ug.add_edge(u, v, weight=net.cost((u, v), prices) + net.cost((v, u), prices))
        if not nx.is_connected(ug):
            raise BaselineError("no spanning tree of GPUs that reach each other directly or "
                                "through switches only both ways, none of which keeps sums")
        mst = nx.minimum_spanning_tree(ug)
        top = nx.center(mst)[0]
        return top, {c: p for p, c in nx.bfs_edges(mst, top)}
    assert root is not None
    arcs = {}
    for (u, v) in net.routes:
        if v != root:
            arcs[(u, v)] = net.cost((u, v), prices)
    return root, min_arborescence(net.gpus, root, arcs)


def min_arborescence(nodes: list, root, cost: dict[tuple, float]) -> dict:
    """The cheapest spanning arborescence out of ``root`` over the arcs of ``cost``
    (node → parent), by Chu–Liu/Edmonds: every node takes its cheapest arc in; a cycle
    of such arcs is contracted (arcs into it cost what they save over the cycle's own)
    and the contracted problem solved; raises :class:`BaselineError` when a node has no
    arc in. (networkx's takes seconds per call on a 32-GPU overlay.)

    >>> tree = min_arborescence(["r", "a", "b"], "r", {("r", "a"): 5, ("a", "b"): 1,
    ...                                                ("b", "a"): 1, ("r", "b"): 3})
    >>> sorted(tree.items())
    [('a', 'b'), ('b', 'r')]
    """
    best: dict = {}
    for (u, v), c in cost.items():
        if v != root and u != v and (v not in best or c < cost[(best[v], v)]):
            best[v] = u
    if len(best) < len(nodes) - 1:
        raise BaselineError(f"not every GPU is reached from {root} by GPUs that reach each "
                            "other directly or through switches only")
    seen: dict = {}
    for s in nodes:
        walk, x = [], s
        while x != root and x not in seen:
            seen[x] = s
            walk.append(x)
            x = best[x]
        if x != root and seen[x] == s:
            cycle = set(walk[walk.index(x):])
            break
    else:
        return dict(best)
    # the contracted node: no GPU's name, and no knot of a deeper call, which has fewer
    # nodes (a key spelled from its members' names grew twice as long per nested knot)
    knot = ("cycle", len(nodes))
    inner: dict[tuple, float] = {}
    origin: dict[tuple, tuple] = {}
    for (u, v), c in cost.items():
        key = (knot if u in cycle else u, knot if v in cycle else v)
        if key[0] == key[1]:
            continue
        c -= cost[(best[v], v)] if v in cycle else 0.0
        if key not in inner or c < inner[key]:
            inner[key], origin[key] = c, (u, v)
    parent = {}
    for v, p in min_arborescence([n for n in nodes if n not in cycle] + [knot], root,
                                 inner).items():
        u0, v0 = origin[(p, v)]
        parent[v0] = u0
    return {**{v: best[v] for v in cycle if v not in parent}, **parent}


def _master(net: _Net, cols: list[Counter[Link]], rate: float | None
            ) -> tuple[list[float], dict[Link, float], float]:
    """The master LP over the trees ``cols`` (every link's ``Σ w·use ≤ bandwidth``): with
    ``rate`` None, max ``Σ w``; else, at ``Σ w ≥ rate``, min the links' time busy beyond
    a share :data:`_BUSY` of it (``Σ u``, ``use ≤ (_BUSY + u)·bandwidth``) +
    :data:`_TIME` × ``Σ w·time`` (:meth:`_Net.time`): the links the rate does not need
    full keep slack for the pipelines' fill. Returns the weights, each link's price (its
    duals, ≥ 0) and the rate row's dual."""
    from ortools.linear_solver import pywraplp  # loaded where a packed tree is built

    lp = pywraplp.Solver.CreateSolver("GLOP")
    w = [lp.NumVar(0, lp.infinity(), "") for _ in cols]
    used = sorted({link for c in cols for link in c})
    rows = {link: [lp.Constraint(-lp.infinity(), net.bw[link])] for link in used}
    goal = lp.Objective()
    floor = lp.Constraint(rate, lp.infinity()) if rate is not None else None
    if floor is not None:
        for link in used:
            over = lp.NumVar(0, lp.infinity(), "")
            goal.SetCoefficient(over, 1.0)
            row = lp.Constraint(-lp.infinity(), _BUSY * net.bw[link])
            row.SetCoefficient(over, -net.bw[link])
            rows[link].append(row)
    for c, x in zip(cols, w, strict=True):
        for link, n in c.items():
            for row in rows[link]:
                row.SetCoefficient(x, n)
        if floor is None:
            goal.SetCoefficient(x, 1.0)
        else:
            floor.SetCoefficient(x, 1.0)
            goal.SetCoefficient(x, _TIME * net.time(c))
    if floor is None:
        goal.SetMaximization()
    else:
        goal.SetMinimization()
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        raise BaselineError("the tree packing LP has no optimum")
    prices = {k: sum(abs(r.dual_value()) for r in rs) for k, rs in rows.items()}
    return [x.solution_value() for x in w], prices, (abs(floor.dual_value()) if floor else 1.0)


def _seed(net: _Net, kind: CollectiveKind, root: str | None, hop: dict[Link, float]
          ) -> tuple[list[tuple[str, Tree]], list[Counter[Link]]]:
    """Distinct trees to start the column generation from, by multiplicative weights: each
    round takes the cheapest tree and raises the price of the links it loads. Spanning
    trees of a mesh overlap on most links, so the LP's duals alone add trees for a long
    time before the rate moves (it is degenerate)."""
    prices = dict(hop)
    trees: list[tuple[str, Tree]] = []
    cols: list[Counter[Link]] = []
    for _ in checked(range(_SEED_ROUNDS), TEMPLATE):
        top, tree = _price(net, kind, root, prices)
        col = net.use(_pairs(kind, tree))
        if tree not in (t for _, t in trees):
            trees.append((top, tree))
            cols.append(col)
        step = min(net.bw[h] / n for h, n in col.items())
        for h, n in col.items():
            prices[h] *= 1 + _GROWTH * n * step / net.bw[h]
    return trees, cols


def pack(net: _Net, kind: CollectiveKind, root: str | None) -> list[tuple[float, str, Tree]]:
    """Trees (rate in bytes per second, root, tree): :func:`_generate` from the tree of
    the fewest and fastest hops alone, and from :func:`_seed`'s trees where that reaches a
    rate :data:`_SEED_GAIN` higher (fewer trees pipeline better: each gets more pieces).
    """
    hop = {k: 1 / b for k, b in net.bw.items()}
    first = _price(net, kind, root, hop)
    alone = _generate(net, kind, root, [first], [net.use(_pairs(kind, first[1]))])
    seeded = _generate(net, kind, root, *_seed(net, kind, root, hop))
    rate = sum(w for w, _, _ in alone)
    return seeded if sum(w for w, _, _ in seeded) > rate * (1 + _SEED_GAIN) else alone


def _generate(net: _Net, kind: CollectiveKind, root: str | None,
              trees: list[tuple[str, Tree]], cols: list[Counter[Link]]
              ) -> list[tuple[float, str, Tree]]:
    """Column generation from ``trees`` (``cols`` their link use): the highest total
    rate, then, within :data:`_SLACK` of it, the trees that leave the most slack on the
    links outside the bottleneck, ties to the least link time (fewer and faster hops:
    shallower pipelines)."""
    hop = {k: 1 / b for k, b in net.bw.items()}
    trees, cols = list(trees), list(cols)
    rate = None
    for phase in (0, 1):
        for _ in checked(range(_ROUNDS), TEMPLATE):
            _, prices, pi = _master(net, cols, rate)
            # the link time is part of a tree's cost in the second phase, a tie-break in the first
            prices = {k: prices.get(k, 0.0) + (_TIME if phase else _HOP) * hop[k] for k in hop}
            top, tree = _price(net, kind, root, prices)
            col = net.use(_pairs(kind, tree))
            if not phase:
                col_cost = sum((prices[h] - _HOP * hop[h]) * n for h, n in col.items())
            else:
                col_cost = sum(prices[h] * n for h, n in col.items())
            if col_cost >= pi * (1 - 1e-6) or tree in (t for _, t in trees):
                break
            trees.append((top, tree))
            cols.append(col)
        if phase == 0:
            rate = sum(_master(net, cols, None)[0]) * (1 - _SLACK)
    weights = _master(net, cols, rate)[0]
    return [(w * net.scale, top, tree) for w, (top, tree) in zip(weights, trees, strict=True)
            if w > _EPS]


def flow_paths(net: _Net, root: str, into: bool) -> dict[str, list[tuple[float, list[str]]]]:
    """Per GPU, its paths to ``root`` (``into``) or from it, each with its share of the
    GPU's data, from the fastest single-commodity flow (every GPU one unit)."""
    from ortools.linear_solver import pywraplp  # loaded where a packed tree is built

    lp = pywraplp.Solver.CreateSolver("GLOP")
    scale = max(net.bw.values())
    arcs = [p for p in net.routes if (p[1] if not into else p[0]) != root]
    f = {a: lp.NumVar(0, lp.infinity(), "") for a in arcs}
    t = lp.NumVar(0, lp.infinity(), "t")
    on: dict[Link, list[Link]] = defaultdict(list)
    for a in arcs:
        for h in _hops(net.routes[a]):
            on[h].append(a)
    for h, users in on.items():
        lp.Add(sum(f[a] for a in users) <= t * net.bw[h] / scale)
    out: dict[str, list[Link]] = defaultdict(list)
    inn: dict[str, list[Link]] = defaultdict(list)
    for a in arcs:
        out[a[0]].append(a)
        inn[a[1]].append(a)
    for v in net.gpus:
        if v != root:
            net_out = sum(f[a] for a in out[v]) - sum(f[a] for a in inn[v])
            lp.Add(net_out == (1 if into else -1))
    lp.Minimize(t)
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        raise BaselineError(f"not every GPU reaches {root} through GPUs and switches")
    left = {a: x.solution_value() for a, x in f.items() if x.solution_value() > _EPS}
    paths: dict[str, list[tuple[float, list[str]]]] = {}
    for v in net.gpus:
        if v != root:
            paths[v] = _decompose(left, v, root, into)
    return paths


def _decompose(left: dict[Link, float], v: str, root: str, into: bool
               ) -> list[tuple[float, list[str]]]:
    """Peel one unit of ``v``'s flow off ``left`` as simple paths (shortest first)."""
    found, need = [], 1.0
    while need > 1e-6:
        g = nx.DiGraph((a if into else a[::-1]) for a, x in left.items() if x > _EPS)
        try:
            path = nx.shortest_path(g, v, root)
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            break
        arcs = [(a if into else a[::-1]) for a in _hops(path)]
        amount = min(need, *(left[a] for a in arcs))
        for a in arcs:
            left[a] -= amount
        found.append((amount, path if into else path[::-1]))
        need -= amount
    return found


def _deal(n: int, weights: list[float]) -> list[int]:
    """For each of ``n`` pieces in turn, the index of the weight it goes to: about
    ``n·w/Σw`` each (largest remainder), spread evenly over the sequence so that every
    tree's or path's pieces come at a steady pace.

    >>> _deal(5, [2.0, 1.0, 1.0])
    [0, 1, 0, 2, 0]
    """
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [math.floor(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])[:n - sum(counts)]:
        counts[i] += 1
    given, order = [0] * len(counts), []
    for i in range(n):
        j = max((j for j in range(len(counts)) if given[j] < counts[j]),
                key=lambda j: (counts[j] * (i + 1) / n - given[j], -j))
        given[j] += 1
        order.append(j)
    return order


def _balance(net: _Net, n: int, weights: list[float], cols: list[Counter[Link]]) -> list[int]:
    """For each of ``n`` pieces in turn, the tree it goes down: of those behind their LP
    weight, the one that leaves the busiest of its links least busy (ties: the tree
    furthest behind). Whole pieces cannot follow the weights exactly, and one piece too
    many on a slow link the whole collective waits for (a rail at 50 GB/s) costs more
    than on a fast one."""
    total, load, given, order = sum(weights), Counter(), [0] * len(weights), []
    for i in range(n):
        def after(j: int, i: int = i) -> tuple[float, float]:
            busiest = max((load[h] + k) / net.bw[h] for h, k in cols[j].items())
            return busiest, given[j] - weights[j] / total * (i + 1)

        behind = [j for j in range(len(weights)) if given[j] < weights[j] / total * (i + 1)]
        j = min(behind or range(len(weights)), key=after)
        load.update(cols[j])
        given[j] += 1
        order.append(j)
    return order


def pieces(topology: Topology, collective: Collective, steps_per_piece: float,
            cap: int = PIECES) -> Collective:
    """The collective cut into up to ``cap`` pieces (whole multiples of its chunks), as
    many as the runtime's element limit per rank holds at ``steps_per_piece`` steps of a
    rank per piece, none under :data:`MIN_PIECE_BYTES`; for AllReduce none under what a
    link carries in its α either: pieces that short are all in flight at once, a
    connection holds only a few sends, and a rank that sends to and receives from every
    peer of its trees then needs more thread blocks than a GPU has (dgx2 AllReduce 1 MB
    in 8 KiB pieces)."""
    floor = max([MIN_PIECE_BYTES] + [k.latency_s * k.bandwidth_Bps for k in topology.links
                                     if collective.kind is CollectiveKind.ALLREDUCE])
    most = min(cap, int(room(collective.nranks) / max(1.0, steps_per_piece)),
               int(collective.size_bytes // floor))
    factor = max(1, most // collective.nchunks)
    return replace(collective, chunks_per_rank=collective.chunks_per_rank * factor)


def _chain(path: list[str]) -> dict[str, str]:
    return {path[i + 1]: path[i] for i in range(len(path) - 1)}


def packed_fine(topology: Topology, collective: Collective) -> Schedule:
    """:func:`packed` cut into up to :data:`FINE_PIECES` pieces: where the file holds them
    the trees and paths fill faster, and where it does not ``auto`` keeps
    :func:`packed`'s."""
    if _cut(topology, collective, True) == _cut(topology, collective, False):
        raise BaselineError("no finer pieces than the packed template's: the size or the "
                            "runtime's element limit holds them")
    return packed(topology, collective, fine=True)


def packed(topology: Topology, collective: Collective, fine: bool = False) -> Schedule:
    """Pipelined packed trees (Broadcast, Reduce, AllReduce) or flow paths (Gather,
    Scatter) cut into many pieces (see the module docstring; ``fine``: up to
    :data:`FINE_PIECES`, the template ``packed-fine``).

    The pieces do not depend on the chunking asked for (up to rounding), and ``auto``
    races the templates on every chunking it tries: the same pieces give the same
    Schedule object (:func:`_trees_schedule`, :func:`_paths_schedule` keep the last
    few), whose timing the judge has already."""
    kind = collective.kind
    name = "packed-fine" if fine else "packed"
    if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        need, gpu = waited_floor(topology, collective, fine)
        if need > MSCCL.waitable:
            raise BaselineError(f"{name}: {gpu} would need at least {need} thread blocks that "
                                f"others wait for, more than a depid names "
                                f"({MSCCL.waitable})")
    if kind is CollectiveKind.REDUCE:  # the Broadcast of the reversed fabric, played backwards
        fan = topology.reversed()
        cut = _cut(fan, replace(collective, kind=CollectiveKind.BROADCAST), fine)
        return backwards(topology, _trees_schedule(fan, cut, name))
    cut = _cut(topology, collective, fine)
    if kind in (CollectiveKind.GATHER, CollectiveKind.SCATTER):
        return _paths_schedule(topology, cut, name)
    return _trees_schedule(topology, cut, name)


def packed_as_cut(topology: Topology, collective: Collective) -> Schedule:
    """:func:`~te_ccl.baselines.hierarchical.hierarchical_as_cut` for the packed trees of
    a Broadcast or AllReduce: the chunks of ``collective`` are their pieces."""
    if collective.kind not in (CollectiveKind.BROADCAST, CollectiveKind.ALLREDUCE) \
            or collective.nranks < 2:
        raise BaselineError(f"packed trees as cut are for broadcast and allreduce on two or "
                            f"more ranks, not {collective.kind.value}")
    return _trees_schedule(topology, collective, "packed")


def _cut(topology: Topology, collective: Collective, fine: bool) -> Collective:
    """``collective`` cut into the pieces its trees or paths take (:func:`pieces`, up to
    :data:`FINE_PIECES` if ``fine``); a Reduce as the Broadcast it is played from."""
    kind = collective.kind
    if kind not in PACKED_KINDS or collective.nranks < 2:
        raise BaselineError(f"packed trees are for {', '.join(k.value for k in PACKED_KINDS)} "
                            f"on two or more ranks, not {kind.value}")
    if kind is CollectiveKind.REDUCE:
        return _cut(topology.reversed(), replace(collective, kind=CollectiveKind.BROADCAST),
                    fine)
    if kind in (CollectiveKind.GATHER, CollectiveKind.SCATTER):
        # a relay receives and sends each piece
        return pieces(topology, collective, 2, FINE_PIECES if fine else FLOW_PIECES)
    net, trees = _packing(topology, kind, collective.ranks, collective.root)
    total = sum(w for w, _, _ in trees)
    steps = Counter()  # per rank, steps per piece on average: a receive and a send per child
    for w, _, tree in trees:
        for v in net.gpus:
            steps[v] += w / total * (1 + sum(1 for p in tree.values() if p == v))
    return pieces(topology, collective, (2 if kind is CollectiveKind.ALLREDUCE else 1)
                  * max(steps.values()), FINE_PIECES if fine else PIECES)


def waited_floor(topology: Topology, collective: Collective, fine: bool = False
                 ) -> tuple[int, str]:
    """(at least how many thread blocks of one GPU others wait for in the lowered packed
    Broadcast or Reduce, that GPU), counted from the trees and how many pieces each takes,
    before the pieces are laid out and lowered: a lowering whose GPU has more than a
    ``depid`` names (:attr:`~te_ccl.runtime_limits.RuntimeLimits.waitable`) is refused.

    A lower bound for every channel assignment, because the lowering keeps each link's
    send order (a send waits for the previous one on its GPU's out-link, the link to its
    first switch, when that is in another thread block) and a thread block has one send
    and one receive peer:

    * per out-link, of the thread blocks sending to its ``n`` peers, ``n - 1`` are waited
      for (each but the link's last has a send that another thread block's next one
      waits for);
    * Reduce: where ``v`` has several children in a tree, each child's partial of a piece
      is waited for by the next one summed into it or by the send on, in another thread
      block, but for the last one of each piece: of the children of such trees, all but
      one per tree;
    * a thread block counted both ways sends to its parent what it receives from a
      child (a fused step): at most one per parent.

    A Broadcast's receives are counted only through their fused sends (none added)."""
    reduce = collective.kind is CollectiveKind.REDUCE
    fan = topology.reversed() if reduce else topology
    cut = _cut(topology, collective, fine)
    net, trees = _packing(fan, CollectiveKind.BROADCAST, cut.ranks, cut.root)
    cols = [net.use(_pairs(CollectiveKind.BROADCAST, tree)) for _, _, tree in trees]
    used = set(_balance(net, cut.nchunks, [w for w, _, _ in trees], cols))
    peers: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    children: dict[str, set[str]] = defaultdict(set)  # of trees where a GPU has several
    parents: dict[str, set[str]] = defaultdict(set)  # of trees where a GPU has children
    several: Counter[str] = Counter()
    for j in used:
        kids: dict[str, list[str]] = defaultdict(list)
        for c, p in trees[j][2].items():
            kids[p].append(c)
            # the send's out-link: its first switch, or the peer over a direct link
            src, dst = (c, p) if reduce else (p, c)
            path = net.routes[(p, c)]
            peers[src][path[-2] if reduce else path[1]].add(dst)
        for v, ks in kids.items():
            if reduce and len(ks) > 1:
                children[v].update(ks)
                several[v] += 1
            if reduce and v in trees[j][2]:
                parents[v].add(trees[j][2][v])
    need = {v: sum(len(d) - 1 for d in peers[v].values())
            + max(0, len(children[v]) - several[v] - len(parents[v]))
            for v in net.gpus}
    gpu = max(net.gpus, key=need.__getitem__)
    return need[gpu], gpu


@functools.lru_cache(maxsize=4)
def backwards(topology: Topology, fan: Schedule,
              kind: CollectiveKind = CollectiveKind.REDUCE) -> Schedule:
    """The Reduce (Gather) that is Broadcast (Scatter) ``fan`` on the reversed ``topology``
    played backwards: a Gather's reversed sends stay copies."""
    moves = reverse_in_time(fan.transfers, fan.finish_epoch)
    if kind is not CollectiveKind.REDUCE:
        moves = [replace(t, op="copy") for t in moves]
    return Schedule(topology, replace(fan.collective, kind=kind), fan.epoch_s, tuple(moves),
                    fan.info)


@functools.lru_cache(maxsize=4)
def _net(topology: Topology, ranks: tuple[int, ...]) -> _Net:
    return _Net(topology, [topology.gpu(r) for r in ranks])


def _packing(topology: Topology, kind: CollectiveKind, ranks: tuple[int, ...],
             root: int | None) -> tuple[_Net, list[tuple[float, str, Tree]]]:
    """The overlay and :func:`pack`'s trees (neither size nor chunking plays a part);
    raises :class:`BaselineError` where the LP found none (that too is remembered)."""
    net, trees = _packed(topology, kind, ranks, root)
    if not trees:  # the LP's tolerances lose every tree where link rates are far apart
        raise BaselineError(f"packed trees: the LP found no tree on {topology.name}")
    return net, trees


@functools.lru_cache(maxsize=4)
def _packed(topology: Topology, kind: CollectiveKind, ranks: tuple[int, ...],
            root: int | None) -> tuple[_Net, list[tuple[float, str, Tree]]]:
    net = _net(topology, ranks)
    return net, pack(net, kind, topology.gpu(root) if root is not None else None)


@functools.lru_cache(maxsize=4)
def _trees_schedule(topology: Topology, coll: Collective, name: str) -> Schedule:
    """Broadcast or AllReduce pieces ``coll`` down the packed trees (template ``name``)."""
    net, trees = _packing(topology, coll.kind, coll.ranks, coll.root)
    chunks = coll.chunks()
    cols = [net.use(_pairs(coll.kind, tree)) for _, _, tree in trees]
    plans = []
    for chunk, j in zip(chunks, _balance(net, len(chunks), [w for w, _, _ in trees], cols),
                        strict=True):
        _, top, tree = trees[j]
        if coll.kind is CollectiveKind.BROADCAST:
            plans.append(ChunkPlan(chunk.id, top, spread=tree))
        else:
            plans.append(ChunkPlan(chunk.id, top, gather=tree, spread=tree))
    return assemble(name, topology, coll, plans, chunk_major=True)


@functools.lru_cache(maxsize=4)
def _paths_schedule(topology: Topology, coll: Collective, name: str) -> Schedule:
    """Gather or Scatter pieces ``coll`` along the flow paths into (out of) the root."""
    assert coll.root is not None
    root, into = topology.gpu(coll.root), coll.kind is CollectiveKind.GATHER
    paths = flow_paths(_net(topology, coll.ranks), root, into)
    mine: dict[str, list[int]] = defaultdict(list)
    for chunk in checked(coll.chunks(), TEMPLATE, every=256):
        if chunk.destinations:
            mine[topology.gpu(chunk.sources[0] if into else chunk.destinations[0])].append(chunk.id)
    turns = []  # (turn, GPU, plan): every GPU's pieces in turn, so that all paths start at once
    for v, ids in mine.items():
        for k, (cid, j) in enumerate(zip(ids, _deal(len(ids), [w for w, _ in paths[v]]),
                                         strict=True)):
            path = paths[v][j][1]
            turns.append((k, v, ChunkPlan(cid, path[0], spread=_chain(path))))
    plans = [p for _, _, p in sorted(turns, key=lambda x: x[:2])]
    return assemble(name, topology, coll, plans, chunk_major=True)
