"""In-switch collectives as a Schedule in the IR: GPU → L1 → (L2 → L1) → GPU per chunk.

Every chunk of the collective (:meth:`Collective.chunks`) is one switch flow: its
sources send to their L1 (``op="reduce"`` when the chunk is a reduction: the L1
adds the partials that arrive together), the L1s with sources send up to the L2 when
the chunk spans several L1s (the L2 adds them), the L2 multicasts down to the L1s with
destinations, and each L1 multicasts to its destination GPUs. Switches have no buffer,
so every hop leaves in the epoch it arrives: the GPU sends are timed backwards from the
arrival at the top of the tree so the partials meet.

The epoch is the longest time a link takes to deliver a chunk (``chunk_bytes / b + α``,
the slowest link's): every link carries at least one chunk per epoch, and a latency far
below a chunk's time does not cost an epoch a hop. Chunks start in order, each as early as
the link capacities allow (the model's epoch link rules,
:func:`~te_ccl.model.epochs.link_timing`: only as many starts per epoch as still arrive
within the hop's epochs) — the serial phases of the FRED paper, pipelined. This needs switches that reduce and copy (FRED-B, FRED-D).
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.collective.model import Chunk, Collective
from te_ccl.errors import SpecError
from te_ccl.fred.wafer import wafer_from_topology
from te_ccl.model.epochs import epoch_duration, link_timing
from te_ccl.schedule import Schedule, SolveInfo, Transfer
from te_ccl.topology.model import Topology

__all__ = ["in_switch_schedule", "in_switch_candidate"]

Hop = tuple[str, str, int, str]  # src, dst, start offset, op


def _tree(topo: Topology, chunk: Chunk, l1_of: dict[str, str], l2: str,
          hops: dict[tuple[str, str], int]) -> list[Hop]:
    """Hops of one chunk with start offsets (epochs after the chunk's base epoch)."""
    op = "reduce" if chunk.reduce else "copy"
    srcs = [topo.gpu(r) for r in chunk.sources]
    dsts = [topo.gpu(r) for r in chunk.destinations]
    src_l1 = sorted({l1_of[g] for g in srcs})
    dst_l1 = sorted({l1_of[g] for g in dsts})
    up = len(set(src_l1) | set(dst_l1)) > 1
    # epoch at which the top of the tree (L2 if used, else the single L1) holds the chunk
    top = max(hops[(g, l1_of[g])] + (hops[(l1_of[g], l2)] if up else 0) for g in srcs)
    out: list[Hop] = []
    for g in srcs:
        k = l1_of[g]
        at_l1 = top - (hops[(k, l2)] if up else 0)
        out.append((g, k, at_l1 - hops[(g, k)], op))
    if up:
        for k in src_l1:
            out.append((k, l2, top - hops[(k, l2)], op))
        for k in dst_l1:
            out.append((l2, k, top, "copy"))
    for g in dsts:
        k = l1_of[g]
        out.append((k, g, top + (hops[(l2, k)] if up else 0), "copy"))
    return out


def in_switch_schedule(topology: Topology, collective: Collective) -> Schedule:
    """Schedule ``collective`` with every reduction and multicast done in the switches.

    Raises
    ------
    SpecError
        If the topology is not a FRED wafer whose switches reduce and copy.
    """
    wafer = wafer_from_topology(topology)
    if not wafer.in_switch:
        raise SpecError("in-switch collectives need switches that reduce and copy "
                        "(FRED-B or FRED-D)", file=topology.name, key="switches")
    bad = [r for r in (*collective.ranks, *([] if collective.root is None else [collective.root]))
           if not 0 <= r < topology.ngpus]
    if bad or len(set(collective.ranks)) != len(collective.ranks):
        raise SpecError(f"ranks must be distinct and in 0..{topology.ngpus - 1}",
                        file=topology.name, key="ranks")
    l1_of = {g: wafer.l1_names[wafer.l1_of(topology.rank(g))] for g in topology.gpus}
    tau = epoch_duration(topology, collective.chunk_bytes, "slowest")
    timing = {link.key: link_timing(link, collective.chunk_bytes, tau)
              for link in topology.links}
    hops = {key: t.delay for key, t in timing.items()}
    cap = {key: t.capacity for key, t in timing.items()}  # τ ≥ every chunk time: occupancy 1
    used: dict[tuple[str, str, int], int] = defaultdict(int)
    transfers: list[Transfer] = []
    base = 0
    for chunk in collective.chunks():
        if not chunk.destinations:
            continue
        tree = _tree(topology, chunk, l1_of, wafer.l2_name, hops)
        shift = -min(start for _, _, start, _ in tree)
        while any(used[(s, d, base + shift + t)] >= cap[(s, d)] for s, d, t, _ in tree):
            base += 1
        for s, d, t, op in tree:
            start = base + shift + t
            used[(s, d, start)] += 1
            transfers.append(Transfer(chunk.id, s, d, start, start + hops[(s, d)], op))
    info = SolveInfo(backend="fred-in-switch", status="constructed",
                     notes=("every reduction and multicast in the FRED switches",))
    return Schedule(topology, collective, tau, tuple(sorted(transfers)), info)


def in_switch_candidate(topology: Topology, collective: Collective) -> Schedule | None:
    """The in-switch schedule where it applies (a FRED wafer whose switches reduce and
    copy), else None: ``auto`` weighs it against the flow schedule and the templates, since
    the flow model solves an AllReduce as ReduceScatter then AllGather and so sends every
    byte twice where a reducing switch needs it sent once."""
    if not any(topology.node(s).can_reduce for s in topology.switches):
        return None
    try:
        return in_switch_schedule(topology, collective)
    except SpecError:
        return None
