"""Pipelined link-disjoint trees from the root over direct links: rooted collectives at
any size.

A Broadcast at the bound streams the data out of every link of the root at once and
keeps each stream moving at a link's rate all the way down. Here the root's ``k`` direct
GPU neighbours each start a spanning tree (:func:`disjoint_trees`): the trees are grown
together, one breadth-first layer of each in turn, each link going to at most one tree,
so the trees do not compete for a link and stay about as shallow as the network (a mesh
corner's two trees reach the far corner in its 62 hops at 32×32). The collective is cut
into pieces dealt to the trees by their rate; each piece flows down its tree, and every
GPU forwards it while the next comes in. A tree of depth ``D`` with ``P`` pieces finishes
about ``(D − 1)/P`` of the stream after the root's links fall silent, so the pieces are
as many as the runtime's element limit and :data:`MAX_TRANSFERS` allow
(``pipeline-fine``: :data:`FINE_TRANSFERS`).

Scatter sends each GPU's pieces down the trees (balanced over the root's links), the
farthest GPUs' first, so the root's links never wait and the last piece has one hop to
go. Reduce and Gather are Broadcast and Scatter on the
reversed network, played backwards.

Where the root has no direct link, boxes behind switches (:func:`box_trees`) or one
switch (two hops: the root sends each piece to one GPU, which passes it to the rest;
Scatter and Gather go straight) stand for the links.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import replace

import networkx as nx

from te_ccl.baselines.arborescences import MAX_GPUS, unit_arborescences
from te_ccl.baselines.cycle import ring_neighbours
from te_ccl.baselines.grid_trees import torus_trees
from te_ccl.baselines.hierarchical import find_boxes
from te_ccl.baselines.packed import FINE_PIECES, backwards, pieces
from te_ccl.baselines.plan import (
    TEMPLATE,
    BaselineError,
    ChunkPlan,
    assemble,
    depth,
    route,
)
from te_ccl.baselines.ring import ring_order
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import SHARES, checked, left, slowdown
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["PIPELINE_KINDS", "applies", "box_heaps_apply", "box_trees", "disjoint_trees",
           "fine_time_left", "fine_transfers", "hub_trees", "hubs_apply", "pipeline",
           "pipeline_boxes", "pipeline_fine", "pipeline_hubs", "pipeline_units", "units_apply"]

PIPELINE_KINDS = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE, CollectiveKind.GATHER,
                  CollectiveKind.SCATTER)
MAX_TRANSFERS = 20_000  # link transfers a Broadcast or Scatter is cut into at most: a file
#                         that size is built, lowered, verified and replayed in a 10 s compile
#                         with room to spare, and a Reduce's GPUs need no more thread blocks
#                         than a step can wait for (relays in DGX-2 or FRED boxes do at 40,000)
FINE_TRANSFERS = 200_000  # the same for pipeline-fine (mesh 16×16: 784 pieces), built only
TRANSFER_S = 6e-5  # about what building, lowering, verifying and replaying one transfer of
#                    such a file costs
RUNG = 2 ** 0.25  # one file's transfers over the next coarser one's (fine_transfers): the
#                   fill shrinks with the pieces' number, so a step finer than halving keeps
#                   more of the pieces the time left allows
REDUCE_FAN = 3  # a far box's GPUs below a relay, as pipeline-fine's Reduce sums them: a heap
#                 of this fan-out (an 8-GPU box two levels deep, where a chain is seven; a
#                 GPU summing a piece from all its box waits for each partial in turn, and
#                 fan-out 2 is three levels)

Tree = dict[str, str]  # node -> parent


def disjoint_trees(topology: Topology, root: str, members: list[str]) -> list[Tree]:
    """Spanning out-trees of ``members`` from ``root`` over direct member-to-member links,
    one per link out of the root, no link in two trees where the growth finds one free.

    The GPUs join the trees in breadth-first layers from the root: each GPU takes, for
    every tree, a free link from a GPU already in that tree (the shallowest such GPU; the
    trees with the fewest such links choose first). A tree no free link brings the GPU
    into yet it joins later, from a GPU of a later layer (on a mesh's edge the second tree
    comes back from the row inside). A GPU no free link ever brings into a tree joins it
    over a taken link, which the timing then shares. Raises :class:`BaselineError` when
    the root has no direct link to a member or a member is not reached over such links.

    >>> from te_ccl.topology.generators import ring
    >>> sorted(sorted(t.items()) for t in disjoint_trees(ring(4, 1.0), "g0",
    ...                                                  ["g0", "g1", "g2", "g3"]))
    [[('g1', 'g0'), ('g2', 'g1'), ('g3', 'g2')], [('g1', 'g2'), ('g2', 'g3'), ('g3', 'g0')]]
    """
    inside = set(members)
    into: dict[str, list[str]] = {v: [] for v in members}
    for k in topology.links:
        if k.src in inside and k.dst in inside and k.src != k.dst:
            into[k.dst].append(k.src)
    starts = sorted((v for v in members if root in into[v]), key=members.index)
    if not starts:
        raise BaselineError(f"{root} has no direct link to another of the collective's GPUs "
                            f"in {topology.name}")
    taken = {(root, v) for v in starts}
    trees: list[Tree] = [{v: root} for v in starts]
    level: list[dict[str, int]] = [{root: 0, v: 1} for v in starts]
    graph = nx.DiGraph((u, v) for v, us in into.items() for u in us)
    graph.add_nodes_from(members)
    layers = list(nx.bfs_layers(graph, root))[1:]
    reached = {root}.union(*layers)
    lost = next((v for v in members if v not in reached), None)
    if lost is not None:
        raise BaselineError(f"{lost} is not reached from {root} over direct links between "
                            f"the collective's GPUs in {topology.name}")
    pending: list[str] = []
    for layer in checked(layers, TEMPLATE, every=1):
        waiting = [*pending, *layer]
        while True:  # a GPU that joins a tree may bring another of this layer into it
            pending = [v for v in waiting if not _join(v, into[v], trees, level, taken)]
            if len(pending) == len(waiting):
                break
            waiting = pending
    for t, tree in enumerate(trees):  # the rest over taken links, a layer at a time
        grew = True
        while grew and len(tree) < len(members) - 1:
            grew = False
            for v in members:
                u = next((u for u in into[v] if u in level[t]), None)
                if v not in level[t] and u is not None:
                    tree[v], level[t][v], grew = u, level[t][u] + 1, True
    return trees


def _join(v: str, parents: list[str], trees: list[Tree], level: list[dict[str, int]],
          taken: set[tuple[str, str]]) -> bool:
    """Bring ``v`` into every tree it is not in yet over a free link from that tree; is it
    in all of them now?"""
    missing = [t for t in range(len(trees)) if v not in level[t]]
    options = {t: [u for u in parents if u in level[t] and (u, v) not in taken]
               for t in missing}
    for t in sorted(missing, key=lambda t: (len(options[t]), t)):
        free = [u for u in options[t] if (u, v) not in taken]
        if free:
            u = min(free, key=lambda u: level[t][u])
            trees[t][v], level[t][v] = u, level[t][u] + 1
            taken.add((u, v))
    return all(v in d for d in level)


def applies(topology: Topology, collective: Collective) -> bool:
    """Is ``collective`` rooted, of a kind this template builds, with a direct link from
    its root to another of its GPUs (into the root for Reduce and Gather), boxes, or
    (but for Reduce, :func:`pipeline`) every GPU reached from the root through switches
    only?"""
    if collective.kind not in PIPELINE_KINDS or collective.root is None \
            or collective.nranks < 3:
        return False
    root, inside = topology.gpu(collective.root), {topology.gpu(r) for r in collective.ranks}
    into = collective.kind in (CollectiveKind.REDUCE, CollectiveKind.GATHER)
    links = topology.in_links(root) if into else topology.out_links(root)
    if any((k.src if into else k.dst) in inside - {root} for k in links):
        return True
    members = sorted(inside, key=topology.rank)
    if len(find_boxes(topology, members)) > 1:
        return True
    return collective.kind is not CollectiveKind.REDUCE \
        and inside - {root} <= set(ring_neighbours(topology, members)[root])


def _rate(topology: Topology, tree: Tree) -> float:
    """The slowest link of ``tree``: its pieces flow at that rate."""
    return min(topology.link(p, c).bandwidth_Bps for c, p in tree.items())


def _links(topology: Topology, tree: Tree) -> dict[str, int]:
    """Links from its parent to every node of ``tree`` (two through a switch)."""
    return {c: 1 if topology.has_link(p, c) else 2 for c, p in tree.items()}


def pipeline_fine(topology: Topology, collective: Collective) -> Schedule:
    """:func:`pipeline` in up to :data:`FINE_TRANSFERS` transfers: a tree fills a hop per
    piece, so more pieces come closer to the bound. The pieces follow from that count (or
    the largest of its fractions the time left allows, :func:`fine_transfers`) and the
    runtime's element limit alone, so a compile writes one of a few files on any machine,
    and it is not built where its pieces are :func:`pipeline`'s. A Reduce sums up a heap of
    fan-out :data:`REDUCE_FAN` in each box beyond the root's (:func:`box_trees`): at a
    thousand pieces, a GPU summing each piece from all its box makes the file slower than
    its schedule (every partial waits for its turn at that GPU), and a chain through the
    box waits for every GPU's α in turn before the first partial leaves it."""
    fan, coll = _fan(topology, collective)
    transfers = fine_transfers("the finer pipeline's file", FINE_TRANSFERS, MAX_TRANSFERS)
    if _cut(fan, coll, transfers)[0] == _cut(fan, coll, MAX_TRANSFERS)[0]:
        raise BaselineError("no finer pieces than the pipeline template's: the size, the "
                            "runtime's element limit or the time left holds them")
    return pipeline(topology, collective, transfers,
                    box_fan=REDUCE_FAN if collective.kind is CollectiveKind.REDUCE else None)


def fine_time_left(what: str, transfers: int = FINE_TRANSFERS) -> None:
    """Raises :class:`BaselineError` where a file of ``transfers`` transfers (``what``),
    at :data:`TRANSFER_S` each to build and judge (times the machine's
    :func:`~te_ccl.deadline.slowdown`: a loaded machine lowers slower by the clock),
    would take more than ``SHARES.fine_trees`` of the time left: it says whether that
    file is built, never how fine it is (:func:`fine_transfers` picks from a fixed
    ladder)."""
    if not _in_time(transfers):
        raise BaselineError(f"no time left to build and judge {what}")


def fine_transfers(what: str, most: int, fewer_than: int) -> int:
    """The most transfers of ``most``, ``most / RUNG``, ``most / RUNG²``, … (more than
    ``fewer_than``) whose file (``what``) :func:`fine_time_left` allows: where the time
    left cannot lower the finest file, the finest that can be lowered is built, not the
    coarse one; a fixed ladder, so the same few files on any machine. Raises
    :class:`BaselineError` where none is allowed."""
    j = 0
    while int(most / RUNG ** (j + 1)) > fewer_than and not _in_time(int(most / RUNG ** j)):
        j += 1
    transfers = int(most / RUNG ** j)
    fine_time_left(what, transfers)
    return transfers


def _in_time(transfers: int) -> bool:
    """Can a file of ``transfers`` be built and judged in ``SHARES.fine_trees`` of the
    time left (:func:`fine_time_left`)?"""
    return left() * SHARES.fine_trees >= transfers * TRANSFER_S * slowdown()


def box_heaps_apply(topology: Topology, collective: Collective) -> bool:
    """Is ``collective`` a Broadcast or Reduce over more than two boxes, from a root with
    no direct link to another of its GPUs (:func:`pipeline_boxes`)?"""
    if collective.kind not in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE) \
            or collective.root is None or collective.nranks < 3:
        return False
    return not _root_linked(topology, collective) \
        and len(find_boxes(topology, [topology.gpu(r) for r in collective.ranks])) > 2


def pipeline_boxes(topology: Topology, collective: Collective) -> Schedule:
    """:func:`pipeline_fine`'s Broadcast or Reduce with the boxes in two binary trees
    (:func:`box_trees`, ``fanned``) where a chain of boxes would relay each share through
    every box in turn: every hop's α adds to the fill, which grows with the boxes (HGX
    H100 ×16's fifteen boxes beyond the root's), where the trees' grows with their log.
    Only where the root has no direct link to another GPU and there are more than two
    boxes."""
    if not box_heaps_apply(topology, collective):
        raise BaselineError(f"no box trees in {topology.name}: they are for a Broadcast or "
                            "Reduce over more than two boxes from a root without a direct "
                            "link to another GPU")
    fine_time_left("the box trees' file")
    return pipeline(topology, collective, FINE_TRANSFERS,
                    box_fan=1 if collective.kind is CollectiveKind.REDUCE else None, fanned=True,
                    name="pipeline-boxes")


def hubs_apply(topology: Topology, collective: Collective) -> bool:
    """Is ``collective`` a Broadcast :func:`pipeline_boxes` builds, on rails: every GPU of
    the root's box reaches one GPU of every other box through switches only, so that a
    hub's part stays on one rail (:func:`pipeline_hubs`; behind one switch fabric, FRED's,
    the hubs' parts would share its links)?"""
    if collective.kind is not CollectiveKind.BROADCAST \
            or not box_heaps_apply(topology, collective):
        return False
    boxes, reach, _, home = _box_layout(topology, topology.gpu(collective.root),
                                        [topology.gpu(r) for r in collective.ranks])
    return all(len(reach[g].intersection(box)) == 1 for g in boxes[home]
               for b, box in enumerate(boxes) if b != home)


def pipeline_hubs(topology: Topology, collective: Collective) -> Schedule:
    """:func:`pipeline_boxes`' Broadcast down :func:`hub_trees` in up to
    :data:`FINE_TRANSFERS` transfers: every box two box hops from the root's, where the
    heaps' depth grows with the log of the boxes; but a hub sends each piece to all the
    other boxes in turn, which grows with their number (raced with the heaps; not for a
    Reduce, whose hubs would sum from more peers than a thread block's dependency names)."""
    if not hubs_apply(topology, collective):
        raise BaselineError(f"no hub trees in {topology.name}: they are for a Broadcast over "
                            "more than two boxes on rails from a root without a direct link "
                            "to another GPU")
    trees = hub_trees(topology, topology.gpu(collective.root),
                      [topology.gpu(r) for r in collective.ranks])
    shares = [1.0] * len(trees)
    cut = _pieces(topology, collective, shares, trees, FINE_TRANSFERS)
    # charged the transfers it has (rail8x8: two thirds of FINE_TRANSFERS), as the
    # switch trees are: where the time left would not build the heaps' file, it builds this
    fine_time_left("the hub trees' file",
                   cut.nchunks * sum(_links(topology, t)[v] for t in trees for v in t)
                   // len(trees))
    return _broadcast(topology, cut, shares, trees, "pipeline-hubs")


def units_apply(topology: Topology, collective: Collective) -> bool:
    """Is ``collective`` a Broadcast or Reduce of at most :data:`MAX_GPUS` GPUs from a root
    with a direct link to another of them (:func:`pipeline_units`)?"""
    if collective.kind not in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE) \
            or collective.root is None or not 2 < collective.nranks <= MAX_GPUS:
        return False
    return _root_linked(topology, collective)


def _root_linked(topology: Topology, collective: Collective) -> bool:
    """Has ``collective``'s root a direct link to or from another of its GPUs?"""
    root = topology.gpu(collective.root)
    return any(topology.has_link(root, v) or topology.has_link(v, root)
               for v in map(topology.gpu, collective.ranks))


def pipeline_units(topology: Topology, collective: Collective) -> Schedule:
    """Broadcast or Reduce in :data:`FINE_TRANSFERS` transfers down (up) the root's
    arborescences of one link unit each (:func:`unit_arborescences`), equal shares: at
    the min-cut rate where links differ in bandwidth and the link-disjoint trees each
    run at their slowest link's. Not built where those trees already are as many."""
    if not units_apply(topology, collective):
        raise BaselineError(f"the arborescences are for broadcast and reduce from a root "
                            f"with a direct link, up to {MAX_GPUS} GPUs")
    fine_time_left("the arborescences' file")
    fan, coll = _fan(topology, collective)
    members = [fan.gpu(r) for r in coll.ranks]
    root = fan.gpu(coll.root)
    trees = unit_arborescences(fan, root, members,
                               more_than=len(disjoint_trees(fan, root, members)))
    shares = [1.0] * len(trees)
    schedule = _broadcast(fan, _pieces(fan, coll, shares, trees, FINE_TRANSFERS), shares, trees,
                          "pipeline-units")
    return backwards(topology, schedule, collective.kind) if fan is not topology else schedule


def pipeline(topology: Topology, collective: Collective, transfers: int = MAX_TRANSFERS, *,
             box_fan: int | None = None, fanned: bool = False, name: str = "pipeline"
             ) -> Schedule:
    """Broadcast or Reduce in pieces down (up) the root's trees, or Gather or Scatter along
    them (module docstring), in up to ``transfers`` link transfers; ``box_fan``: the GPUs
    of a box below a relay form a heap of that fan-out (1: a chain), ``fanned``: the boxes form two trees
    (:func:`box_trees`); ``name``: the template's, in the schedule."""
    kind = collective.kind
    if kind is CollectiveKind.REDUCE and collective.nranks > 2 \
            and not applies(topology, collective):
        raise BaselineError(f"no pipelined Reduce in {topology.name}: its root has no direct "
                            "link and there are no boxes (behind one switch, a GPU would sum "
                            "each piece from all the others: more thread blocks than it runs)")
    fan, coll = _fan(topology, collective)
    cut, shares, trees = _cut(fan, coll, transfers, box_fan, fanned)
    build = _scatter if coll.kind is CollectiveKind.SCATTER else _broadcast
    schedule = build(fan, cut, shares, trees, name)
    if coll.kind is CollectiveKind.BROADCAST and len(trees) > 1:
        chain = _chain(fan, coll, schedule.finish_time_s)
        if chain is not None:
            one = _broadcast(fan, _pieces(fan, coll, [1.0], [chain], transfers), [1.0], [chain],
                             name)
            schedule = min(schedule, one, key=lambda s: s.finish_time_s)
    return backwards(topology, schedule, kind) if fan is not topology else schedule


def _chain(topology: Topology, collective: Collective, beat: float) -> Tree | None:
    """The GPUs in ring order from the root as one chain, where its sends take every
    byte the root's links can send (each hop's route, sharing no link beyond its
    bandwidth, as fast as the root's links together: GPUs behind switches, FRED's
    wafer) and its floor (the data at that rate, then the path's α) is below ``beat``
    seconds; else None. Every GPU forwards each piece once, one piece behind the one
    before it: the fill costs a piece per GPU, where the trees' relays send each of
    their pieces to several GPUs in turn."""
    root = topology.gpu(collective.root)
    out = sum(k.bandwidth_Bps for k in topology.out_links(root))
    if max(k.bandwidth_Bps for k in topology.links) < out * (1 - 1e-9):
        return None  # no hop is as fast as the root's links (meshes, tori): no ring order
    members = [topology.gpu(r) for r in collective.ranks]
    graph = topology.graph()
    graph.remove_nodes_from(set(topology.gpus) - set(members))
    order = ring_order(topology, members)
    at = order.index(root)
    path = order[at:] + order[:at]
    use: dict[tuple[str, str], int] = defaultdict(int)
    for u, v in zip(path, path[1:], strict=False):
        way = route(topology, u, v, via_gpus=True, graph=graph)
        for hop in zip(way, way[1:], strict=False):
            use[hop] += 1
    rate = min(topology.link(*hop).bandwidth_Bps / n for hop, n in use.items())
    alpha = sum(topology.link(*hop).latency_s * n for hop, n in use.items())
    if rate < out * (1 - 1e-9) or collective.size_bytes / rate + alpha >= beat:
        return None
    return dict(zip(path[1:], path, strict=False))


def _fan(topology: Topology, collective: Collective) -> tuple[Topology, Collective]:
    """The Broadcast or Scatter ``collective`` is built as: itself, or for Reduce (Gather)
    the Broadcast (Scatter) of the reversed network, played backwards after."""
    if collective.kind not in PIPELINE_KINDS or collective.root is None \
            or collective.nranks < 2:
        raise BaselineError("the pipelined trees are for broadcast, reduce, gather and "
                            f"scatter from a root, not {collective.kind.value}")
    if collective.kind is CollectiveKind.REDUCE:
        return topology.reversed(), replace(collective, kind=CollectiveKind.BROADCAST)
    if collective.kind is CollectiveKind.GATHER:
        return topology.reversed(), replace(collective, kind=CollectiveKind.SCATTER)
    return topology, collective


def _cut(topology: Topology, collective: Collective, transfers: int,
         box_fan: int | None = None, fanned: bool = False) -> tuple[Collective, list[float], list[Tree]]:
    """Broadcast or Scatter ``collective`` cut into pieces of at most ``transfers`` link
    transfers in all (and the runtime's element limit), with the trees' shares and the
    trees."""
    members = tuple(topology.gpu(r) for r in collective.ranks)
    scatter = collective.kind is CollectiveKind.SCATTER
    shares, trees = _trees(topology, topology.gpu(collective.root), members, scatter,
                           box_fan, fanned)
    if scatter:
        links = [_links(topology, t) for t in trees]
        depths = [{v: depth(t, v) for v in t} for t in trees]
        each = sum(min(d[v] for d in depths) for v in trees[0])  # hops of a piece per rank
        each *= max(max(n.values()) for n in links)  # two through a switch
        # a fifth of the transfers, but a piece per tree where they allow: a few pieces
        # per rank balance the trees (one per rank leaves some trees idle); one where
        # every GPU hangs from the root, whose link carries every piece once anyway
        per_rank = min(transfers // each, max(len(trees), transfers // (5 * each)))
        if all(d == 1 for ds in depths for d in ds.values()):
            per_rank = 1
        return pieces(topology, collective, 2, max(1, per_rank) * collective.nchunks), \
            shares, trees
    return _pieces(topology, collective, shares, trees, transfers), shares, trees


def _pieces(topology: Topology, collective: Collective, shares: list[float],
            trees: list[Tree], transfers: int) -> Collective:
    """The Broadcast cut into pieces dealt to ``trees`` by their ``shares``: at most
    ``transfers`` link transfers in all, and within the runtime's element limit."""
    total = sum(shares)
    steps: dict[str, float] = defaultdict(float)  # a GPU's steps per piece: receive + sends
    for share, tree in zip(shares, trees, strict=True):
        kids: dict[str, int] = defaultdict(int)
        for p in tree.values():
            kids[p] += 1
        for v in {*tree, *kids}:
            steps[v] += share / total * ((v in tree) + kids[v])
    per_piece = sum(w / total * sum(_links(topology, t).values())
                    for w, t in zip(shares, trees, strict=True))
    cap = min(FINE_PIECES, max(1, int(transfers // per_piece)))
    return pieces(topology, collective, max(steps.values()), cap)


@functools.lru_cache(maxsize=4)
def _trees(topology: Topology, root: str, members: tuple[str, ...], scatter: bool,
           box_fan: int | None = None, fanned: bool = False
           ) -> tuple[list[float], list[Tree]]:
    """The trees' shares of the data and the trees: a torus's shallowest
    (:func:`torus_trees`) or else :func:`disjoint_trees` by their rates where direct
    links reach every member, else :func:`box_trees`, but for a Scatter behind one switch
    every GPU straight from the root."""
    try:
        trees = _direct_trees(topology, root, members)
        return [_rate(topology, t) for t in trees], trees
    except BaselineError:
        if scatter and len(find_boxes(topology, list(members))) < 2:
            return [1.0], [{v: root for v in members if v != root}]
    boxed = box_trees(topology, root, list(members), box_fan, fanned)
    return [share for share, _ in boxed], [tree for _, tree in boxed]


@functools.lru_cache(maxsize=4)
def _direct_trees(topology: Topology, root: str, members: tuple[str, ...]) -> list[Tree]:
    """A torus's shallowest trees (:func:`torus_trees`) or else :func:`disjoint_trees`:
    once for the templates that differ only in how boxes would be treed (:func:`_trees`)."""
    return torus_trees(topology, root, list(members)) \
        or disjoint_trees(topology, root, list(members))


def box_trees(topology: Topology, root: str, members: list[str], fan: int | None = None,
              fanned: bool = False) -> list[tuple[float, Tree]]:
    """Trees with their shares of the data for boxes of GPUs behind switches: a share
    per gateway of the root's box (a GPU that reaches another box through switches only:
    every GPU on rails), each cut into one part per other GPU of a box. The root sends a
    share to its gateway, the gateways of that rail pass it from box to box, and in every
    box the gateway hands each part to another GPU, which sends it to the rest: every
    link out of a box carries its share once, and every GPU's link into its box's switch
    about the data once (a gateway sending its share to all its box would carry it once
    per GPU: DGX-2's 16 GPUs on 150 GB/s NVLink behind 100 GB/s of InfiniBand; where a
    box has no more GPUs than there are shares, the gateway sends to all). One box (GPUs
    behind one switch) is the root's share alone: two hops from the root to every GPU,
    where a chain through all of them would wait for every GPU's α in turn. ``fan``: the
    GPUs below a relay form a heap of that fan-out under it instead (a Reduce's sums then
    take at most ``fan`` partials at a GPU; 1: a chain), but for a chain in the root's
    box, whose GPUs also take every rail's share: a heap's further peers there need more
    thread blocks than a ``depid`` names (HGX H100 ×16 Reduce). ``fanned``: the boxes
    beyond the root's form two binary trees instead of a chain (:func:`_box_heap`), each
    carrying half the shares: the boxes' depth is logarithmic, not linear, in their
    number. Raises :class:`BaselineError` when a GPU is not reached so."""
    boxes, reach, gateways, home = _box_layout(topology, root, members)
    order = [home] + [b for b in range(len(boxes)) if b != home]
    firsts = gateways[home] if len(boxes) > 1 else [root]
    if fanned and len(boxes) > 2:
        ups, rails = _box_halves(order, len(firsts), topology.name)
        chains = [_box_links(order, ups[t], rail, root, boxes, gateways, reach, topology.name)
                  for t, rail in rails]
    else:
        chain = {b: a for a, b in zip(order, order[1:], strict=False)}
        chains = [_box_links(order, chain, dict.fromkeys(order, i), root, boxes, gateways,
                             reach, topology.name) for i in range(len(firsts))]
    shares = len(chains)

    def relays(b: int, gw: str) -> list[str]:
        """The GPUs that pass on the parts of ``gw``'s share in box ``b`` (none: ``gw``
        sends it to all): the root's box for its own share, and a box with more GPUs
        than shares (a gateway sending to all would carry its share more times than
        there are shares)."""
        rest = [v for v in boxes[b] if v not in (gw, root)]
        return rest if gw == root or len(rest) > shares else []

    parts = max([len(relays(b, gw)) for chain in chains for b, _, gw in chain] + [1])
    out: dict[frozenset, tuple[float, Tree]] = {}  # a tree that several parts take: once
    onwards = [{sender for _, sender, _ in chain} for chain in chains]
    for j in range(parts):  # part-major: the pieces' rounding spreads over the shares
        for i, chain in enumerate(chains):
            tree: Tree = {}
            onward = onwards[i]
            for b, sender, gw in chain:
                if gw != root:
                    _hang(tree, gw, sender, reach, topology.name)
                rest = [v for v in boxes[b] if v not in (gw, root)]
                via = relays(b, gw)
                # the relay is taken from the box's GPUs in one order for every share (the
                # gateway too: it then sends the part itself), so the shares of one part
                # have different relays, and the next part's shares the next ones along: a
                # relay's pieces come spread over the stream, not in a burst
                pool = [v for v in boxes[b] if v != root]
                relay = pool[(i + j * shares) % len(pool)] if via else gw
                if relay != gw:
                    _hang(tree, relay, gw, reach, topology.name)
                # a relay (or a gateway sending to all) sends to the GPUs below it in the
                # box first, in turn: those of pieces in flight together send to different
                # GPUs at once, where one order for all would queue them at the same link
                # (the GPUs that send the share on to another box over another rail first:
                # the boxes below wait for them)
                box = boxes[b]
                at, hung = box.index(relay), [relay]
                each = 1 if fan and b == home else fan
                turn = [box[(at - k) % len(box)] for k in range(1, len(box))]
                for v in sorted(turn, key=lambda v: v not in onward):
                    if v in rest and v != relay:
                        above = hung[(len(hung) - 1) // each] if each else relay
                        _hang(tree, v, above, reach, topology.name)
                        hung.append(v)
            key = frozenset(tree.items())
            out[key] = (out.get(key, (0.0, tree))[0] + 1 / parts, tree)
    return list(out.values())


def hub_trees(topology: Topology, root: str, members: list[str]) -> list[Tree]:
    """One tree per gateway of the root's box and other box (its hub), equal shares: the
    root sends the tree's pieces to that gateway (the root's own rail: to one GPU of its
    box, another per hub, which passes them on in the box), the gateway sends them over
    its rail to the hub's gateway, and that one over the same rail to the gateway of
    every other box; in every box the gateway that takes them sends them to the rest.

    Every rail into a box carries an eighth of the data where there are eight (its own
    hub's part from the root's box, every other hub's from that hub), as in
    :func:`box_trees`' heaps, but every box is two box hops from the root's, no piece
    changes rail inside a box, and a gateway of the root's box sends each piece to
    another hub, so no one slow receiver holds the root's stream. Raises
    :class:`BaselineError` where a gateway does not reach another box's over a rail."""
    boxes, reach, gateways, home = _box_layout(topology, root, members)
    others = [b for b in range(len(boxes)) if b != home]
    pool = [v for v in boxes[home] if v != root]
    trees: list[Tree] = []
    for n, hub_box in enumerate(checked(others, TEMPLATE, every=1)):
        for first in gateways[home]:  # the rails in turn: each piece leaves on the next
            tree: Tree = {}
            top = pool[n % len(pool)] if first == root and pool else first
            if top != root:
                _hang(tree, top, root, reach, topology.name)
            hub = _rail_peer(first, gateways[hub_box], reach, topology.name)
            _hang(tree, hub, first, reach, topology.name)
            takes = {home: top, hub_box: hub}
            for b in others:
                if b != hub_box:
                    takes[b] = _rail_peer(hub, gateways[b], reach, topology.name)
                    _hang(tree, takes[b], hub, reach, topology.name)
            for b, gw in takes.items():  # the rest of the box from the GPU after gw on
                at = boxes[b].index(gw)
                for v in boxes[b][at + 1:] + boxes[b][:at]:
                    if v not in tree and v != root:
                        _hang(tree, v, gw, reach, topology.name)
            trees.append(tree)
    return trees


def _rail_peer(sender: str, gateways: list[str], reach: dict[str, set[str]],
               where: str) -> str:
    """The first of a box's ``gateways`` that ``sender`` reaches through switches only."""
    peer = next((g for g in gateways if g in reach[sender]), None)
    if peer is None:
        raise BaselineError(f"{sender} reaches no gateway of another box through switches "
                            f"only in {where}")
    return peer


def _box_layout(topology: Topology, root: str, members: list[str]
                ) -> tuple[list[list[str]], dict[str, set[str]], list[list[str]], int]:
    """The boxes of ``members``, the GPUs each reaches through switches only, each box's
    gateways (GPUs that so reach another box) and the root's box."""
    boxes = find_boxes(topology, members)
    reach = {g: set(vs) for g, vs in ring_neighbours(topology, members).items()}
    box_of = {g: b for b, box in enumerate(boxes) for g in box}
    gateways = [[g for g in box if any(box_of[v] != b for v in reach[g])]
                for b, box in enumerate(boxes)]
    return boxes, reach, gateways, box_of[root]


def _box_heap(order: list[int], t: int) -> dict[int, int]:
    """The boxes beyond the root's (``order[0]``) as a binary heap under it (box → box
    it hears from), in ``order`` for ``t = 0`` and reversed for ``t = 1``: the inner boxes
    of one heap are leaves of the other, so each box sends its data on about once, as
    NCCL's double binary tree does with GPUs.

    >>> _box_heap([0, 1, 2, 3], 0), _box_heap([0, 1, 2, 3], 1)
    ({1: 0, 2: 1, 3: 1}, {3: 0, 2: 3, 1: 3})
    """
    rest = order[1:] if t == 0 else order[:0:-1]
    return {b: order[0] if p == 0 else rest[(p - 1) // 2] for p, b in enumerate(rest)}


def _box_halves(order: list[int], rails: int, where: str
                ) -> tuple[list[dict[int, int]], list[tuple[int, dict[int, int]]]]:
    """The two heaps of :func:`_box_heap` and, per share, its heap and the rail it takes
    into every box (the root's box: the rail it leaves on). Each heap carries half the
    shares, one a rail of one half of the rails: a box takes one heap's shares on one
    half and the other's on the other, and sends its heap's shares to its two boxes
    below, one on each half (a relay inside the box hands a share to the other half's
    gateway), so every rail into and out of a box carries one share from one GPU to
    one GPU. The halves are a 2-colouring of the boxes: siblings of a heap differ, and
    the two heaps' tops match (the root's box sends one heap's shares on the half the
    other's do not take); raises :class:`BaselineError` where there is none or the
    rails do not halve."""
    if rails < 2 or rails % 2:
        raise BaselineError(f"no box trees in {where}: its boxes' rails do not halve")
    ups = [_box_heap(order, t) for t in (0, 1)]
    ties: dict[int, list[tuple[int, int]]] = defaultdict(list)  # box -> (box, same side?)
    for up in ups:
        below: dict[int, list[int]] = defaultdict(list)
        for b, a in up.items():
            below[a].append(b)
        for kids in below.values():
            for u, v in zip(kids, kids[1:], strict=False):
                ties[u].append((v, 1))
                ties[v].append((u, 1))
    tops = [next(iter(up)) for up in ups]
    ties[tops[0]].append((tops[1], 0))
    ties[tops[1]].append((tops[0], 0))
    side: dict[int, int] = {}
    for start in order[1:]:
        if start in side:
            continue
        side[start], queue = 0, [start]
        while queue:
            u = queue.pop()
            for v, flip in ties[u]:
                if v not in side:
                    side[v] = side[u] ^ flip
                    queue.append(v)
                elif side[v] != side[u] ^ flip:
                    raise BaselineError(f"no box trees in {where}: its boxes do not split "
                                        "into two sides")
    half = rails // 2
    shares = []
    for t, up in enumerate(ups):
        for q in range(half):
            rail = {b: q + half * (side[b] ^ t) for b in up}
            rail[order[0]] = rail[tops[t]]
            shares.append((t, rail))
    return ups, shares


def _box_links(order: list[int], up: dict[int, int], rail: dict[int, int], root: str,
               boxes: list[list[str]], gateways: list[list[str]], reach: dict[str, set[str]],
               where: str) -> list[tuple[int, str, str]]:
    """A share's way into every box, each box below the one ``up`` names (parents
    first): (box, the GPU that sends to it, the gateway that takes it). The share
    leaves the root's box on ``rail[order[0]]`` and comes into box ``b`` on ``rail[b]``:
    a box sends it on from the gateway it came in by where the rail is the same, else
    from the other rail's gateway (a relay inside the box has handed it on)."""
    home = order[0]
    first = gateways[home][rail[home] % len(gateways[home])] if len(order) > 1 else root
    links, came = [(home, root, first)], {home: first}
    for b, a in up.items():
        sender = came[a] if rail[a] == rail[b] else gateways[a][rail[b] % len(gateways[a])]
        near = [g for g in gateways[b] if g in reach[sender]]
        if not near:
            raise BaselineError(f"no gateway of {boxes[b][0]}'s box is reached from "
                                f"{sender} through switches only in {where}")
        gw = gateways[b][rail[b] % len(gateways[b])]
        came[b] = gw if gw in near else near[0]
        links.append((b, sender, came[b]))
    return links


def _hang(tree: Tree, child: str, parent: str, reach: dict[str, set[str]], where: str) -> None:
    if child not in reach[parent]:
        raise BaselineError(f"{parent} does not reach {child} through switches only in {where}")
    tree[child] = parent


def _broadcast(topology: Topology, coll: Collective, rates: list[float],
               trees: list[Tree], name: str = "pipeline") -> Schedule:
    """The Broadcast's pieces (:func:`_cut`) dealt to the trees in turn by their shares
    (``rates``): each to the tree that is done first with it, so trees of small shares
    (a share cut into parts) do not each round up."""
    root = topology.gpu(coll.root)
    given, plans = [0.0] * len(trees), []
    for chunk in checked(coll.chunks(), TEMPLATE, every=256):
        t = min(range(len(trees)), key=lambda i: ((given[i] + 0.5) / rates[i], i))
        given[t] += 1
        plans.append(ChunkPlan(chunk.id, root, spread=trees[t]))
    return assemble(name, topology, coll, plans)


def _scatter(topology: Topology, coll: Collective, rates: list[float],
             trees: list[Tree], name: str = "pipeline") -> Schedule:
    """The Scatter's pieces (:func:`_cut`), each down the tree least loaded by its rate;
    on every tree the farthest GPUs' first, the trees in turn."""
    root = topology.gpu(coll.root)
    depths = [{v: depth(t, v) for v in t} for t in trees]
    load = [0.0] * len(trees)
    queues: list[list[tuple[int, int, ChunkPlan]]] = [[] for _ in trees]
    # the far GPUs' pieces first, each to the tree least loaded by its rate (ties: the
    # shallowest): the root's links carry every piece and set the time
    wanted = [(topology.gpu(c.destinations[0]), c.id) for c in coll.chunks() if c.destinations]
    wanted.sort(key=lambda x: (-min(d[x[0]] for d in depths), x[1]))
    for v, cid in checked(wanted, TEMPLATE, every=256):
        t = min(range(len(trees)), key=lambda i: ((load[i] + 1) / rates[i], depths[i][v], i))
        load[t] += 1
        path = [v]
        while path[-1] != root:
            path.append(trees[t][path[-1]])
        queues[t].append((-depths[t][v], cid, ChunkPlan(cid, root, spread=dict(
            zip(path, path[1:], strict=False)))))
    for q in queues:
        q.sort(key=lambda x: x[:2])
    plans, at = [], [0] * len(trees)
    while len(plans) < len(wanted):  # the trees in turn, each by its rate
        t = min((i for i in range(len(trees)) if at[i] < len(queues[i])),
                key=lambda i: (at[i] / rates[i], i))
        plans.append(queues[t][at[t]][2])
        at[t] += 1
    return assemble(name, topology, coll, plans, chunk_major=True)
