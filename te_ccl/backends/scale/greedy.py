"""Epoch-by-epoch greedy link–chunk assignment (TACOS-like), vectorised with bitsets.

At every epoch each free link ``u → v`` starts one chunk that ``u`` holds and ``v``
neither holds nor has under way; the in-links of one node choose in turn so they never
pick the same chunk (the per-node matching of in-links × missing chunks). Each link takes
the first candidate at or after a random position of the chunk order (seeded, so
reproducible). Measured: a fixed global order (every link prefers the same chunks, with
or without a preference for hops away from the source) lands 1.3–1.6× off the cut
bound on mesh/torus 8×8, because neighbours end up holding the same chunks and links
idle; the random start (like rarest-first, which measured the same in a prototype) keeps
holdings diverse: 1.004–1.016×. Among the candidates a link prefers the chunks its
source has not forwarded yet: a relay that forwards what it received is one fused step in
the MSCCL lowering instead of a receive and a send, so fewer leaves mean fewer steps per
rank (mesh 32×32 AllGather: 284 → 138 leaves per chunk, finish unchanged at 515 epochs;
mesh 16×16 with 2 chunks per GPU: 63 → 52, which the tests check). Among those, it prefers
the chunks that arrived over its *partner* in-link (:func:`_pairing`: straight on through a
grid): the lowering fuses a relay on a channel that pairs its receive and send peers one
to one, so relays that keep the same pairs fuse on every channel (interior relays of the
mesh 16×16 forwarding straight on first: 67% → 91%; finish unchanged).
Link rules are those of :mod:`te_ccl.model.epochs`.

Every node receives a chunk at most once, so the result is a forest per chunk: valid for
the reversed problems behind reductions (``Problem.tree``) too. GPU-only topologies.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.model.problem import build_problem
>>> from te_ccl.topology.generators import ring
>>> p = build_problem(ring(4, 1e9), Collective(CollectiveKind.ALLGATHER, 4000, (0, 1, 2, 3)))
>>> m = greedy_transfers(p, [d.chunk for d in p.demands])
>>> len(m), m.finish
(12, 2)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from te_ccl.backends.scale import bitsets
from te_ccl.backends.scale.moves import Moves
from te_ccl.deadline import check, checked
from te_ccl.errors import SolverError
from te_ccl.model.problem import Problem

__all__ = ["Net", "net_of", "greedy_transfers"]

GREEDY = "running the scale greedy"  # what a deadline reached interrupted
_DRAWS_PER_CALL = 1 << 20  # skipped epochs' random draws made per call (8 MB at most)


@dataclass(frozen=True)
class Net:
    """A GPU-only network in index form: per link its ends and epoch timing."""

    names: tuple[str, ...]
    src: np.ndarray
    dst: np.ndarray
    occupancy: np.ndarray
    delay: np.ndarray
    rounds: tuple[np.ndarray, ...]  # link slots, at most one per destination node each
    partner: np.ndarray  # per link u → v the link w → u whose chunks it forwards first

    def link_index(self) -> dict[tuple[str, str], int]:
        """Each link's row, keyed by its ends' names (for planned routes)."""
        return {(self.names[u], self.names[v]): i for i, (u, v) in
                enumerate(zip(self.src.tolist(), self.dst.tolist(), strict=True))}


def net_of(problem: Problem) -> Net:
    """Index form of ``problem``'s links; a link of capacity c appears in c rounds, but
    in no more rounds than there are chunks: a long epoch (set by a slow link) gives the
    fast links millions of starts an epoch, of which no more than that can be used."""
    topo = problem.topology
    if topo.switches:
        raise SolverError("the greedy of the scale backend needs a GPU-only topology "
                          f"({topo.name!r} has switches)")
    names = tuple(n.name for n in topo.nodes)
    index = {n: i for i, n in enumerate(names)}
    keys = sorted(problem.timings)
    lts = [problem.timings[k] for k in keys]
    src = np.array([index[u] for u, _ in keys], dtype=np.int64)
    dst = np.array([index[v] for _, v in keys], dtype=np.int64)
    slots: dict[int, list[int]] = defaultdict(list)
    most = max(1, len(problem.demands))
    for i, lt in enumerate(lts):
        slots[int(dst[i])].extend([i] * min(lt.capacity, most))
    depth = max((len(s) for s in slots.values()), default=0)
    rounds = tuple(np.array([s[j] for s in slots.values() if len(s) > j], dtype=np.int64)
                   for j in range(depth))
    return Net(names, src, dst, np.array([lt.occupancy for lt in lts], dtype=np.int64),
               np.array([lt.delay for lt in lts], dtype=np.int64), rounds,
               _partners(keys, topo.graph().to_undirected(), problem.tree))


def _partners(keys: list[tuple[str, str]], g: nx.Graph, reverse: bool) -> np.ndarray:
    """Per link ``u → v`` the link ``w → u`` whose chunks it forwards first, else −1.

    On a reversed graph (``reverse``: a reduction played backwards) the pairing is that
    of the original graph (whose out-neighbours are the reversed graph's in-neighbours)
    inverted, so that both phases of an AllReduce relay with the same pairs once the
    first is turned around (a GPU's 3-cycle would otherwise run both ways)."""
    index = {k: i for i, k in enumerate(keys)}
    ins: dict[str, list[str]] = defaultdict(list)
    outs: dict[str, list[str]] = defaultdict(list)
    for u, v in keys:
        outs[u].append(v)
        ins[v].append(u)
    out = np.full(len(keys), -1, dtype=np.int64)
    for u, vs in outs.items():
        if reverse:  # the pairing on the graph before reversal, turned around
            pairs = {v: w for w, v in _pairing(u, vs, ins[u], g).items()}
        else:
            pairs = _pairing(u, ins[u], vs, g)
        for v, w in pairs.items():
            out[index[(u, v)]] = index[(w, u)]
    return out


def _pairing(u: str, ins: list[str], outs: list[str], g: nx.Graph) -> dict[str, str]:
    """A one-to-one pairing of ``u``'s out-neighbours with in-neighbours (never a
    neighbour with itself): straight on where there is one (``w`` opposite ``v``: their
    only common neighbour is ``u``, both ways), the others in a cycle; at a grid border
    the third neighbour joins the straight pair in a 3-cycle.

    >>> from te_ccl.topology.generators import mesh
    >>> g = mesh([3, 3], 1e9).graph().to_undirected()
    >>> ns = sorted(g["g4"])  # the centre: straight on
    >>> sorted(_pairing("g4", ns, ns, g).items())
    [('g1', 'g7'), ('g3', 'g5'), ('g5', 'g3'), ('g7', 'g1')]
    >>> ns = sorted(g["g1"])  # a border: g0 → g1 → g2 straight, g4 → g1 → g0, g2 → g1 → g4
    >>> sorted(_pairing("g1", ns, ns, g).items())
    [('g0', 'g4'), ('g2', 'g0'), ('g4', 'g2')]
    """
    def opposite(v: str) -> str | None:
        ws = [w for w in g[u] if w != v and set(g[w]) & set(g[v]) == {u}]
        return ws[0] if len(ws) == 1 else None

    pair = {v: w for v in outs if (w := opposite(v)) in ins and opposite(w) == v}
    rest_out = sorted(v for v in outs if v not in pair)
    taken = set(pair.values())
    rest_in = sorted(w for w in ins if w not in taken)
    if len(rest_out) == 1 and rest_in == rest_out and pair:
        x, (v, w) = rest_out[0], min(pair.items())
        pair.update({x: w, v: x})  # w → x → v → w instead of w → v
    elif rest_in == rest_out:
        pair.update({rest_out[(i + 1) % len(rest_out)]: w for i, w in enumerate(rest_in)
                     if len(rest_out) > 1})
    else:
        free = list(rest_out)
        for w in rest_in:
            v = next((v for v in free if v != w), None)
            if v is not None:
                free.remove(v)
                pair[v] = w
    return pair


def _initial(problem: Problem, net: Net, order: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(held, needed) bitsets at epoch 0: rows are nodes, bit ``b`` is chunk ``order[b]``."""
    index = {n: i for i, n in enumerate(net.names)}
    bit = {c: b for b, c in enumerate(order)}
    held = [(index[v], bit[c]) for c, v in problem.state.held if c in bit]
    need = [(index[v], bit[d.chunk]) for d in checked(problem.demands, GREEDY)
            for v in d.destinations]

    def matrix(pairs: list[tuple[int, int]]) -> np.ndarray:
        rows, cols = (np.array(x, dtype=np.int64) for x in zip(*pairs, strict=True)) \
            if pairs else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        return bitsets.from_pairs(len(net.names), len(order), rows, cols)

    return matrix(held), matrix(need)


def greedy_transfers(problem: Problem, order: list[int], *,
                     deadline: Callable[[], bool] = lambda: False, seed: int = 0,
                     prefer: tuple[np.ndarray, ...] = (), tiers: tuple[np.ndarray, ...] = (),
                     routes: np.ndarray | None = None) -> Moves:
    """Run the greedy until every destination holds its chunks (see the module docstring).

    ``prefer``: chunk bitsets per link (rows in :func:`net_of`'s link order, bits in
    ``order``), most preferred first; each narrows a link's candidates where it leaves
    any. When given, they replace the default preferences and the random start: each link
    takes the first chunk in ``order`` among its most preferred candidates (planned routes,
    oldest first, keep their pipelines going). ``tiers`` narrow them further in the same
    way, but each link's chunks are in at most one of them (a tree's heights), so a link
    takes its candidates in the first tier that has any and the rest need not be looked
    at. ``routes``: one more chunk bitset per link, the only chunks it may send (fixed
    trees; each chunk's must span its destinations).

    Raises SolverError when nothing can move any more (a destination is unreachable) or
    ``deadline()`` turns true, and :class:`~te_ccl.deadline.TimeLimitReached` once the
    compile's deadline passes.
    """
    if problem.state.incoming or problem.state.busy:
        raise SolverError("the scale greedy starts from an empty network (no carried state)")
    net = net_of(problem)
    held, need = _initial(problem, net, order)
    incoming = np.zeros_like(held)
    forwarded = np.zeros_like(held)
    via = bitsets.zeros(len(net.src) + 1, nbits := len(order))  # last row: no link
    rng = np.random.default_rng(seed)
    free_at = np.zeros(len(net.src), dtype=np.int64)
    slow = net.occupancy > 1
    arrivals: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = defaultdict(list)
    picked: list[tuple[int, np.ndarray, np.ndarray]] = []
    planned = bool(prefer or tiers)
    t = 0
    while True:
        for over, rows, cols in arrivals.pop(t, ()):
            bitsets.set_bits(held, rows, cols)
            bitsets.set_bits(via, over, cols)
        if not (need & ~held).any():
            break
        moved, drawn = 0, []
        for links in net.rounds:
            links = links[free_at[links] <= t]
            drawn.append(len(links))
            s, d = net.src[links], net.dst[links]
            cand = held[s] & ~held[d] & ~incoming[d]
            if routes is not None:
                cand &= routes[links]
            masks = [m[links] for m in prefer] if planned else \
                [~forwarded[s], via[net.partner[links]]]
            for mask in masks:
                on = cand & mask
                cand = np.where(on.any(axis=1, keepdims=True), on, cand)
            _first_tier(cand, links, tiers)
            b = (bitsets.first_bits(cand) if planned
                 else bitsets.first_bits_from(cand, rng.integers(0, nbits, size=len(links))))
            ok = b >= 0
            links, d, b = links[ok], d[ok], b[ok]
            if not links.size:
                continue
            bitsets.set_bits(incoming, d, b)
            bitsets.set_bits(forwarded, s[ok], b)
            free_at[links[slow[links]]] = t + net.occupancy[links[slow[links]]]
            for delay in np.unique(net.delay[links]):
                sel = net.delay[links] == delay
                arrivals[t + int(delay)].append((links[sel], d[sel], b[sel]))
            picked.append((t, links, b))
            moved += links.size
        if not moved and not arrivals:
            raise SolverError("infeasible: the greedy can move nothing and some destination "
                              "still lacks a chunk (is it reachable?)")
        if deadline():
            raise SolverError(f"time limit reached in the scale greedy at epoch {t}")
        check(GREEDY)
        t = _next_epoch(t, moved, arrivals, free_at, None if planned else (rng, nbits, drawn))
    return _to_moves(net, order, picked, t)


def _next_epoch(t: int, moved: int, arrivals: dict[int, list], free_at: np.ndarray,
                draws: tuple[np.random.Generator, int, list[int]] | None) -> int:
    """The next epoch in which anything can move: ``t + 1``, or, where nothing moved in
    ``t``, the first epoch in which a chunk arrives or a busy link is free again (until
    then every link has the same candidates, none). Where chunks are small and links
    have latency that skips most epochs (a hop takes hundreds at 1 KB). ``draws``: the
    random start's generator, chunk count and draws per round of ``t``; the draws of the
    skipped epochs are made, so the schedule is the one each epoch in turn gives."""
    if moved:
        return t + 1
    busy = free_at[free_at > t]
    until = min([*arrivals, *([int(busy.min())] if busy.size else [])], default=t + 1)
    if draws is not None:
        rng, nbits, drawn = draws  # the stream a call per round draws, in fewer calls
        left = max(0, until - t - 1) * sum(drawn)
        while left > 0:
            rng.integers(0, nbits, size=min(left, _DRAWS_PER_CALL))
            left -= _DRAWS_PER_CALL
    return max(until, t + 1)


def _first_tier(cand: np.ndarray, links: np.ndarray, tiers: tuple[np.ndarray, ...]) -> None:
    """Narrow each row of ``cand`` (candidates of ``links``) to its candidates in the first
    of the disjoint ``tiers`` that has any, in place."""
    todo = np.flatnonzero(cand.any(axis=1))
    for tier in tiers:
        if not todo.size:
            return
        on = cand[todo] & tier[links[todo]]
        hit = on.any(axis=1)
        cand[todo[hit]] = on[hit]
        todo = todo[~hit]


def _to_moves(net: Net, order: list[int], picked, finish: int) -> Moves:
    """Picked starts as moves; those still under way when all demands are met are dropped."""
    if not picked:
        return Moves.of(net.names, ())
    links = np.concatenate([x[1] for x in picked])
    start = np.concatenate([np.full(len(x[1]), x[0], dtype=np.int64) for x in picked])
    chunk = np.array(order, dtype=np.int64)[np.concatenate([x[2] for x in picked])]
    arrive = start + net.delay[links]
    keep = arrive <= finish
    return Moves(net.names, chunk[keep], net.src[links][keep], net.dst[links][keep],
                 start[keep], arrive[keep])
