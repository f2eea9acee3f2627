"""Numbers that characterise a topology: size, diameter, bisection bandwidth.

* **Diameter** over GPU pairs along directed links: in hops, and α-weighted (the
  smallest sum of link latencies, maximised over GPU pairs).
* **Bisection bandwidth**: the minimum, over splits of the GPUs into halves A and B
  (sizes ⌊n/2⌋ and ⌈n/2⌉, either order), of the minimum cut A → B — the least total
  bandwidth of directed links whose removal leaves no path from A to B, where each
  switch may fall on either side. It is **exact** when no link joins two GPUs and
  there are at most 16 switches (switch placements are enumerated, GPUs then pick
  sides greedily), or when the number of (split, switch placement) pairs is at most
  :data:`EXACT_LIMIT` (every one is evaluated with numpy); otherwise it is
  **approximate**: the minimum over structured candidate splits —
  contiguous rank halves at several rotations, halves along each grid axis for
  mesh/torus, interleaved rank blocks — each cut computed exactly by max-flow. The
  approximation is an upper bound on the true bisection.

>>> from te_ccl.topology.generators import torus
>>> b = bisection_bandwidth(torus([4, 4], 50e9))
>>> b.bandwidth_Bps / 1e9, b.exact
(400.0, True)
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

import networkx as nx
import numpy as np

from te_ccl.topology.model import Topology

__all__ = ["Bisection", "Summary", "EXACT_LIMIT", "diameter_hops", "diameter_latency_s",
           "bisection_bandwidth", "link_groups", "summarize"]

EXACT_LIMIT = 4_000_000  # (split, switch placement) pairs evaluated for an exact bisection
_ROTATIONS = 16
_MAX_SWITCHED = 16  # switch placements enumerated when no link joins two GPUs


@dataclass(frozen=True)
class Bisection:
    """Bisection bandwidth (bytes/s), whether it is exact, and the GPUs on the sending side."""

    bandwidth_Bps: float
    exact: bool
    sending_side: tuple[str, ...]


@dataclass(frozen=True)
class Summary:
    ngpus: int
    nswitches: int
    nlinks: int
    diameter_hops: int
    diameter_latency_s: float
    bisection: Bisection


def _gpu_distances(topo: Topology, weight: str | None) -> float:
    g = topo.graph()
    gpus = set(topo.gpus)
    worst = 0.0
    for src in topo.gpus:
        if weight is None:
            dist = nx.single_source_shortest_path_length(g, src)
        else:
            dist = nx.single_source_dijkstra_path_length(g, src, weight=weight)
        worst = max(worst, max(d for n, d in dist.items() if n in gpus))
    return worst


def diameter_hops(topo: Topology) -> int:
    """Most links on a shortest directed path between two GPUs.

    >>> from te_ccl.topology.generators import ring
    >>> diameter_hops(ring(8, 1e9)), diameter_hops(ring(8, 1e9, bidirectional=False))
    (4, 7)
    """
    return int(_gpu_distances(topo, None))


def diameter_latency_s(topo: Topology) -> float:
    """Largest, over GPU pairs, of the smallest total latency α along a directed path."""
    latencies = {link.latency_s for link in topo.links}
    if len(latencies) == 1:  # uniform α: the fewest hops is also the least latency
        return diameter_hops(topo) * latencies.pop()
    return _gpu_distances(topo, "latency")


def _symmetric(topo: Topology) -> bool:
    return all(topo.has_link(k.dst, k.src) and topo.link(k.dst, k.src).bandwidth_Bps
               == k.bandwidth_Bps for k in topo.links)


def _exact_splits(topo: Topology) -> np.ndarray:
    """Boolean rows over GPUs (True = sending side) of every balanced split to examine."""
    n = topo.ngpus
    sizes = {n // 2, n - n // 2}
    fixed = _symmetric(topo) and n % 2 == 0  # symmetric: cut(A→B) = cut(B→A); fix GPU 0 in A
    rows = []
    for size in sorted(sizes):
        for combo in itertools.combinations(range(1, n) if fixed else range(n),
                                            size - 1 if fixed else size):
            rows.append((0,) + combo if fixed else combo)
    mask = np.zeros((len(rows), n), dtype=bool)
    row_of = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
    mask[row_of, np.fromiter(itertools.chain.from_iterable(rows), dtype=int)] = True
    return mask


def _count_exact(topo: Topology) -> int:
    n = topo.ngpus
    splits = sum(math.comb(n, s) for s in {n // 2, n - n // 2})
    if _symmetric(topo) and n % 2 == 0:
        splits //= 2
    return splits * 2 ** len(topo.switches)


def _exact(topo: Topology) -> Bisection:
    index = {name: i for i, name in enumerate(topo.gpus + topo.switches)}
    src = np.array([index[k.src] for k in topo.links])
    dst = np.array([index[k.dst] for k in topo.links])
    bw = np.array([k.bandwidth_Bps for k in topo.links])
    gpu_side = _exact_splits(topo)
    best, best_row = math.inf, 0
    nsw = len(topo.switches)
    for placement in itertools.product((True, False), repeat=nsw):
        sides = np.hstack([gpu_side, np.broadcast_to(np.array(placement, dtype=bool),
                                                     (len(gpu_side), nsw))])
        cuts = (sides[:, src] & ~sides[:, dst]) @ bw
        row = int(np.argmin(cuts))
        if cuts[row] < best:
            best, best_row = float(cuts[row]), row
    side = tuple(g for g, on in zip(topo.gpus, gpu_side[best_row], strict=True) if on)
    return Bisection(best, True, side)


def _exact_switched(topo: Topology) -> Bisection:
    """Exact bisection when no link joins two GPUs: enumerate switch placements only.

    With the switches placed, each GPU's cost depends only on its own side (links to
    switches on the other side), so the best split takes the GPUs with the smallest
    (cost on the sending side − cost on the receiving side).
    """
    sw = {name: i for i, name in enumerate(topo.switches)}
    gp = {name: i for i, name in enumerate(topo.gpus)}
    place = np.array(list(itertools.product((True, False), repeat=len(sw))), dtype=bool)
    up = np.zeros((len(sw), len(gp)))    # up[s, v]: bandwidth v -> s
    down = np.zeros((len(sw), len(gp)))  # down[s, v]: bandwidth s -> v
    between = []
    for k in topo.links:
        if k.src in gp:
            up[sw[k.dst], gp[k.src]] += k.bandwidth_Bps
        elif k.dst in gp:
            down[sw[k.src], gp[k.dst]] += k.bandwidth_Bps
        else:
            between.append((sw[k.src], sw[k.dst], k.bandwidth_Bps))
    fixed = np.zeros(len(place))
    for a, b, bw in between:
        fixed += (place[:, a] & ~place[:, b]) * bw
    send = (~place).astype(float) @ up      # GPU on the sending side pays links to B switches
    recv = place.astype(float) @ down       # GPU on the receiving side pays links from A switches
    diff = np.sort(send - recv, axis=1)
    base = fixed + recv.sum(axis=1)
    best, best_key = math.inf, (0, 0)
    for k in sorted({topo.ngpus // 2, topo.ngpus - topo.ngpus // 2}):
        totals = base + diff[:, :k].sum(axis=1)
        row = int(np.argmin(totals))
        if totals[row] < best:
            best, best_key = float(totals[row]), (row, k)
    row, k = best_key
    chosen = np.argsort(send[row] - recv[row], kind="stable")[:k]
    return Bisection(best, True, tuple(topo.gpus[i] for i in sorted(chosen)))


def _orders(topo: Topology) -> list[tuple[int, ...]]:
    """Rank orderings whose first half is a structured candidate split."""
    n = topo.ngpus
    step = max(1, n // _ROTATIONS)
    orders = [tuple((k + i) % n for i in range(n)) for k in range(0, n, step)]
    dims = topo.meta.get("dims")
    if dims and math.prod(dims) == n:
        coords = list(itertools.product(*(range(d) for d in dims)))
        orders += [tuple(sorted(range(n), key=lambda r, a=axis: (coords[r][a], r)))
                   for axis in range(len(dims))]
    block = 1
    while block < n:
        orders.append(tuple(sorted(range(n), key=lambda r, b=block: ((r // b) % 2, r))))
        block *= 2
    return list(dict.fromkeys(orders))


def _cut(topo: Topology, g: nx.DiGraph, side: frozenset[str]) -> float:
    if not topo.switches:
        return sum(k.bandwidth_Bps for k in topo.links if k.src in side and k.dst not in side)
    h = g.copy()
    for name in topo.gpus:
        if name in side:
            h.add_edge("__s", name)  # no capacity attribute = infinite
        else:
            h.add_edge(name, "__t")
    return nx.maximum_flow_value(h, "__s", "__t", capacity="bandwidth")


def _approx(topo: Topology) -> Bisection:
    g = topo.graph()
    best, best_side = math.inf, frozenset()
    sizes = sorted({topo.ngpus // 2, topo.ngpus - topo.ngpus // 2})
    for order in _orders(topo):
        for side in (frozenset(topo.gpus[r] for r in order[:k]) for k in sizes):
            value = _cut(topo, g, side)
            if value < best:
                best, best_side = value, side
    return Bisection(best, False, tuple(x for x in topo.gpus if x in best_side))


def bisection_bandwidth(topo: Topology, exact_limit: int = EXACT_LIMIT) -> Bisection:
    """Bisection bandwidth in bytes/s (see the module docstring for exact vs approximate)."""
    if topo.ngpus < 2:
        raise ValueError("bisection needs at least 2 GPUs")
    gpu_links = any(topo.node(k.src).is_gpu and topo.node(k.dst).is_gpu for k in topo.links)
    if topo.switches and not gpu_links and len(topo.switches) <= _MAX_SWITCHED:
        return _exact_switched(topo)
    return _exact(topo) if _count_exact(topo) <= exact_limit else _approx(topo)


def link_groups(topo: Topology) -> list[tuple[str, float, float, int]]:
    """``(kind, bandwidth_Bps, latency_s, count)`` of directed links, kind like ``gpu-switch``."""
    counts = Counter((f"{topo.node(k.src).kind.value}-{topo.node(k.dst).kind.value}",
                      k.bandwidth_Bps, k.latency_s) for k in topo.links)
    return [(kind, bw, lat, c) for (kind, bw, lat), c in sorted(counts.items())]


def summarize(topo: Topology, exact_limit: int = EXACT_LIMIT) -> Summary:
    """All the metrics of this module in one object."""
    return Summary(topo.ngpus, len(topo.switches), len(topo.links), diameter_hops(topo),
                   diameter_latency_s(topo), bisection_bandwidth(topo, exact_limit))
