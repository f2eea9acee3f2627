"""Numbers that characterise a topology: size, diameter, bisection bandwidth.

* **Diameter** over GPU pairs along directed links: in hops, and α-weighted (the
  smallest sum of link latencies, maximised over GPU pairs). Exact when a search from
  every GPU fits in :data:`DIAMETER_WORK` node and link visits; above that (thousands
  of GPUs) it searches from a sample of GPUs — a double sweep (each search starts from
  the GPU farthest from the previous one) topped up with evenly spaced GPUs — and is a
  **lower bound**, reported as such.
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
  approximation is an upper bound on the true bisection. Max-flow cuts (topologies
  with switches) stop after :data:`FLOW_WORK` nodes and links in all, the most
  telling candidates (contiguous halves, grid axes) first.

Every function takes an optional ``progress(message)`` callback: large topologies take
seconds, and the command line shows where it is.

>>> from te_ccl.topology.generators import torus
>>> b = bisection_bandwidth(torus([4, 4], 50e9))
>>> b.bandwidth_Bps / 1e9, b.exact
(400.0, True)
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from te_ccl.topology.model import Topology

__all__ = ["Bisection", "Diameter", "Summary", "EXACT_LIMIT", "DIAMETER_WORK", "FLOW_WORK",
           "diameter", "diameter_hops", "diameter_latency_s", "bisection_bandwidth",
           "link_groups", "summarize"]

Progress = Callable[[str], None]
EXACT_LIMIT = 4_000_000  # (split, switch placement) pairs evaluated for an exact bisection
DIAMETER_WORK = 20_000_000
"""Node and link visits of the diameter's searches (one search per GPU up to ~2,000 GPUs
of a torus); beyond, the searches start from a sample of GPUs."""
FLOW_WORK = 100_000
"""Nodes and links summed over the max-flow cuts of an approximate bisection."""
_MIN_SOURCES = 8
_ROTATIONS = 16
_MAX_SWITCHED = 16  # switch placements enumerated when no link joins two GPUs


@dataclass(frozen=True)
class Bisection:
    """Bisection bandwidth (bytes/s), whether it is exact, and the GPUs on the sending side."""

    bandwidth_Bps: float
    exact: bool
    sending_side: tuple[str, ...]
    candidates: int = 0   # splits evaluated when approximate


@dataclass(frozen=True)
class Diameter:
    """Diameter in hops and in latency; ``sources`` GPUs searched from (all: exact)."""

    hops: int
    latency_s: float
    exact: bool
    sources: int


@dataclass(frozen=True)
class Summary:
    ngpus: int
    nswitches: int
    nlinks: int
    diameter_hops: int
    diameter_latency_s: float
    bisection: Bisection
    diameter_exact: bool = True
    diameter_sources: int = 0

    def notes(self) -> list[str]:
        """What is estimated rather than exact, in words."""
        out = []
        if not self.diameter_exact:
            out.append(f"diameter is a lower bound: searched from {self.diameter_sources} of "
                       f"{self.ngpus} GPUs")
        if not self.bisection.exact:
            out.append(f"bisection is an upper bound: the least of "
                       f"{self.bisection.candidates} structured splits")
        return out


def _gpu_distances(topo: Topology, weight: str | None, work: int,
                   progress: Progress | None = None) -> tuple[float, int]:
    """The largest GPU-to-GPU distance seen and the number of GPUs searched from."""
    g = topo.graph()
    gpus = set(topo.gpus)
    size = g.number_of_nodes() + g.number_of_edges()
    budget = max(_MIN_SOURCES, work // max(1, size))
    worst, searched, nxt = 0.0, 0, topo.gpus[0]
    spread = iter(topo.gpus[i * topo.ngpus // budget] for i in range(budget))
    seen: set[str] = set()
    while searched < min(budget, topo.ngpus):
        src = nxt if nxt not in seen else next((s for s in spread if s not in seen), None)
        if src is None:
            break
        seen.add(src)
        if weight is None:
            dist = nx.single_source_shortest_path_length(g, src)
        else:
            dist = nx.single_source_dijkstra_path_length(g, src, weight=weight)
        far, nxt = max((d, n) for n, d in dist.items() if n in gpus)
        worst = max(worst, far)
        searched += 1
        if progress is not None and searched % 256 == 0:
            progress(f"diameter: searched from {searched} of {min(budget, topo.ngpus)} GPUs")
    return worst, searched


def diameter(topo: Topology, work: int | None = None,
             progress: Progress | None = None) -> Diameter:
    """Hops and latency diameter, exact or (beyond ``work``) a lower bound.

    >>> from te_ccl.topology.generators import ring
    >>> d = diameter(ring(64, 1e9), work=1)
    >>> d.hops, d.exact, d.sources
    (32, False, 8)
    """
    work = DIAMETER_WORK if work is None else work
    hops, sources = _gpu_distances(topo, None, work, progress)
    latencies = {link.latency_s for link in topo.links}
    if len(latencies) == 1:  # uniform α: the fewest hops is also the least latency
        latency = hops * latencies.pop()
    else:
        latency, sources = _gpu_distances(topo, "latency", work, progress)
    return Diameter(int(hops), latency, sources >= topo.ngpus, sources)


def diameter_hops(topo: Topology) -> int:
    """Most links on a shortest directed path between two GPUs.

    >>> from te_ccl.topology.generators import ring
    >>> diameter_hops(ring(8, 1e9)), diameter_hops(ring(8, 1e9, bidirectional=False))
    (4, 7)
    """
    return diameter(topo).hops


def diameter_latency_s(topo: Topology) -> float:
    """Largest, over GPU pairs, of the smallest total latency α along a directed path."""
    return diameter(topo).latency_s


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
    """Rank orderings whose first half is a structured candidate split, the most telling
    first: contiguous halves, halves along each grid axis, interleaved blocks, rotations."""
    n = topo.ngpus
    step = max(1, n // _ROTATIONS)
    rotations = [tuple((k + i) % n for i in range(n)) for k in range(0, n, step)]
    orders = rotations[:1]
    dims = topo.meta.get("dims")
    if dims and math.prod(dims) == n:
        coords = list(itertools.product(*(range(d) for d in dims)))
        orders += [tuple(sorted(range(n), key=lambda r, a=axis: (coords[r][a], r)))
                   for axis in range(len(dims))]
    block = 1
    while block < n:
        orders.append(tuple(sorted(range(n), key=lambda r, b=block: ((r // b) % 2, r))))
        block *= 2
    return list(dict.fromkeys(orders + rotations[1:]))


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


def _approx(topo: Topology, flow_work: int | None = None,
            progress: Progress | None = None) -> Bisection:
    flow_work = FLOW_WORK if flow_work is None else flow_work
    g = topo.graph()
    best, best_side = math.inf, frozenset()
    sizes = sorted({topo.ngpus // 2, topo.ngpus - topo.ngpus // 2})
    orders = _orders(topo)
    cost = g.number_of_nodes() + g.number_of_edges() if topo.switches else 0
    limit = len(orders) if cost == 0 else max(1, min(len(orders), flow_work // cost))
    evaluated = 0
    for i, order in enumerate(orders[:limit]):
        if progress is not None:
            progress(f"bisection: split {i + 1} of {limit}")
        for side in (frozenset(topo.gpus[r] for r in order[:k]) for k in sizes):
            value = _cut(topo, g, side)
            evaluated += 1
            if value < best:
                best, best_side = value, side
    return Bisection(best, False, tuple(x for x in topo.gpus if x in best_side), evaluated)


def bisection_bandwidth(topo: Topology, exact_limit: int = EXACT_LIMIT,
                        flow_work: int | None = None,
                        progress: Progress | None = None) -> Bisection:
    """Bisection bandwidth in bytes/s (see the module docstring for exact vs approximate)."""
    if topo.ngpus < 2:
        raise ValueError("bisection needs at least 2 GPUs")
    gpu_links = any(topo.node(k.src).is_gpu and topo.node(k.dst).is_gpu for k in topo.links)
    if topo.switches and not gpu_links and len(topo.switches) <= _MAX_SWITCHED:
        return _exact_switched(topo)
    if _count_exact(topo) <= exact_limit:
        return _exact(topo)
    return _approx(topo, flow_work, progress)


def link_groups(topo: Topology) -> list[tuple[str, float, float, int]]:
    """``(kind, bandwidth_Bps, latency_s, count)`` of directed links, kind like ``gpu-switch``."""
    counts = Counter((f"{topo.node(k.src).kind.value}-{topo.node(k.dst).kind.value}",
                      k.bandwidth_Bps, k.latency_s) for k in topo.links)
    return [(kind, bw, lat, c) for (kind, bw, lat), c in sorted(counts.items())]


def summarize(topo: Topology, exact_limit: int = EXACT_LIMIT,
              progress: Progress | None = None) -> Summary:
    """All the metrics of this module in one object (estimates say so in ``notes()``)."""
    d = diameter(topo, progress=progress)
    bisection = (bisection_bandwidth(topo, exact_limit, progress=progress)
                 if topo.ngpus >= 2 else Bisection(0.0, True, ()))
    return Summary(topo.ngpus, len(topo.switches), len(topo.links), d.hops, d.latency_s,
                   bisection, d.exact, d.sources)
