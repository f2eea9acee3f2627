"""AlltoAll on a rail-optimized cluster: every NIC busy from start to end.

Topology (``rail_optimized``): ``B`` boxes of ``G`` GPUs ``b{a}.g{i}`` on an NVSwitch
``b{a}.sw``; GPU ``i`` of every box has a NIC to ``rail{i}``; switches have no buffer.
The bottleneck is the NICs: every GPU must send and receive ``G·(B−1)`` chunks (× sub-
chunks) across boxes; the max-concurrent-flow bound is exactly that NIC time.

Routing (PXN): chunk ``b{a}.g{i} → b{c}.g{j}`` (``c ≠ a``) first crosses the NVSwitch
to ``b{a}.g{j}`` (when ``i ≠ j``), then takes rail ``j`` straight to its destination, so
each NIC carries exactly ``G·(B−1)`` chunks out and in — the flow optimum. Timing: NIC
slot ``p`` (one NIC occupancy long) of every NIC on rail ``j`` goes to box ``a + δ(p)``:
a permutation of the boxes, so the buffer-less rail switch forwards every chunk in the
epoch it arrives without two chunks meeting on an out-link. NVSwitch hops go in rounds
where GPU ``i`` sends to GPU ``i + q`` (again a permutation). Own chunks (``i = j``) fill the
first NIC slots while the relays cross the NVSwitch (9× faster on DGX-class boxes); the
relayed slots wait if the relays are late.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.backends.scale.moves import Moves
from te_ccl.deadline import checked
from te_ccl.model.problem import Problem
from te_ccl.schedule import Transfer
from te_ccl.topology.model import Topology

__all__ = ["rail_shape", "solve_rail_alltoall"]

RAILS = "scheduling the rail AlltoAll"  # what a deadline reached interrupted


def rail_shape(topo: Topology) -> tuple[int, int] | None:
    """(boxes, GPUs per box) of a rail-optimized topology, else None."""
    meta = topo.meta or {}
    boxes, per_box = meta.get("boxes"), meta.get("box_gpus")
    if not boxes or not per_box or topo.ngpus != boxes * per_box:
        return None
    for a in range(boxes):
        for i in range(per_box):
            g = f"b{a}.g{i}"
            for other in (f"b{a}.sw", f"rail{i}"):
                if not (topo.has_link(g, other) and topo.has_link(other, g)):
                    return None
    return boxes, per_box


def _uniform(problem: Problem) -> bool:
    """One timing for all NVLink hops and one for all NIC hops, each one chunk at a time."""
    kinds = defaultdict(set)
    for key, lt in problem.timings.items():
        kinds["rail" in "".join(key)].add((lt.occupancy, lt.capacity, lt.delay))
    return all(len(v) == 1 for v in kinds.values()) and all(
        cap == 1 for v in kinds.values() for _, cap, _ in v)


def _pairs(problem: Problem) -> dict[tuple[str, str], list[int]] | None:
    """(source, destination) → chunk ids, if every GPU pair has the same number (AlltoAll)."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for d in problem.demands:
        if len(d.sources) != 1 or len(d.destinations) != 1:
            return None
        if d.sources != d.destinations:  # a rank's piece for itself stays in place
            out[(d.sources[0], d.destinations[0])].append(d.chunk)
    n = problem.topology.ngpus
    if len(out) != n * (n - 1) or len({len(v) for v in out.values()}) != 1:
        return None
    return dict(out)


def solve_rail_alltoall(problem: Problem) -> tuple[Moves, tuple[str, ...]] | None:
    """(moves, notes), or None when the topology or demands do not fit."""
    shape, pairs = rail_shape(problem.topology), _pairs(problem)
    if shape is None or pairs is None or not _uniform(problem):
        return None
    B, G = shape
    k = len(next(iter(pairs.values())))
    nv = problem.timings[("b0.g0", "b0.sw")]
    nic = problem.timings[("b0.g0", "rail0")]
    out: list[Transfer] = []
    ready: dict[tuple[int, str], int] = {}

    def hop(c: int, u: str, v: str, w: str, t: int, lt) -> int:
        """u → switch v → w from epoch t; returns the arrival epoch at w."""
        a = t + lt.delay
        out.append(Transfer(c, u, v, t, a))
        out.append(Transfer(c, v, w, a, a + lt.delay))
        return a + lt.delay

    g = lambda a, i: f"b{a}.g{i}"  # noqa: E731
    # NVSwitch rounds: relays first (q = i→j offset fastest), then the intra-box chunks.
    rounds = [(c, dbox) for dbox in range(1, B) for c in range(k)] + [(c, 0) for c in range(k)]
    for e, ((sub, dbox), q) in enumerate(checked(((r, q) for r in rounds for q in range(1, G)),
                                                 RAILS, every=1)):
        for a in range(B):
            for i in range(G):
                j, c_box = (i + q) % G, (a + dbox) % B
                chunk = pairs[(g(a, i), g(c_box, j))][sub]
                ready[(chunk, g(a, j))] = hop(chunk, g(a, i), f"b{a}.sw", g(a, j), e, nv)
    # NIC slots: source offset q outermost (own chunks first), then sub-chunk, then box.
    slots = [(q, sub, dbox) for q in range(G) for sub in range(k) for dbox in range(1, B)]
    late = max((ready[(pairs[(g(a, (j + q) % G), g((a + dbox) % B, j))][sub], g(a, j))]
                - p * nic.occupancy for p, (q, sub, dbox) in enumerate(slots) if q
                for a in range(B) for j in range(G)), default=0)
    shift = max(0, late)
    for p, (q, sub, dbox) in enumerate(checked(slots, RAILS, every=1)):
        t = p * nic.occupancy + (shift if q else 0)
        for a in range(B):
            for j in range(G):
                chunk = pairs[(g(a, (j + q) % G), g((a + dbox) % B, j))][sub]
                hop(chunk, g(a, j), f"rail{j}", g((a + dbox) % B, j), t, nic)
    notes = (f"rail AlltoAll (PXN): {B} boxes × {G} GPUs, {k} chunk(s) per pair, "
             f"{len(slots)} NIC slots of {nic.occupancy} epochs per NIC, relayed slots "
             f"delayed {shift} epochs",)
    return Moves.of(tuple(n.name for n in problem.topology.nodes), out), notes
