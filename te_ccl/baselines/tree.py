"""NCCL's double binary tree for Broadcast, Reduce and AllReduce.

Two binary trees over the ranks in ring order (so tree edges tend to be short): the
second is the first built on the reversed order, so most inner nodes of one tree are
leaves of the other and both halves of the data use different links. Chunks alternate
between the trees (the collective is cut into twice as many chunks). Broadcast and Reduce
hang each tree under the root; AllReduce reduces up to each tree's top and broadcasts
back down.

A reduced partial must reach its parent directly or through switches only (a GPU on the
way would add its own partial again). Where a binary tree has an edge without such a
path (no ring to order the GPUs by, as on NDv2 boxes joined by one InfiniBand GPU each),
that tree is replaced by a breadth-first one along such paths: the GPUs on the way become
inner nodes of the tree and sum there.
"""

from __future__ import annotations

from dataclasses import replace

from te_ccl.baselines.cycle import ring_neighbours
from te_ccl.baselines.disjoint import FINE_TRANSFERS, fine_time_left
from te_ccl.baselines.packed import FINE_PIECES, backwards, pieces
from te_ccl.baselines.plan import TEMPLATE, BaselineError, ChunkPlan, assemble, route
from te_ccl.baselines.ring import doubled, ring_order
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import checked
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["SWITCH_TREE_KINDS", "binary_tree", "double_tree", "switch_trees"]

TREE_KINDS = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE, CollectiveKind.ALLREDUCE)
SWITCH_TREE_KINDS = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)


def binary_tree(nodes: list[str], top: str | None = None) -> dict[str, str]:
    """Heap-shaped binary tree over ``nodes`` (node → parent), hung under ``top`` if given.

    >>> binary_tree(["a", "b", "c", "d"], "r")
    {'a': 'r', 'b': 'a', 'c': 'a', 'd': 'b'}
    """
    parent = {nodes[i]: nodes[(i - 1) // 2] for i in range(1, len(nodes))}
    if top is not None and nodes:
        parent = {nodes[0]: top, **parent}
    return parent


def neighbour_tree(adj: dict[str, list[str]], top: str, order: list[str],
                   where: str) -> dict[str, str]:
    """Breadth-first in-tree into ``top`` along ``adj`` (GPU → GPUs it reaches without
    another GPU on the way), children taken in ``order``; raises :class:`BaselineError`
    naming a GPU that cannot reach ``top`` so.

    >>> neighbour_tree({"a": ["b"], "b": ["a", "c"], "c": ["b"]}, "a", ["a", "b", "c"], "")
    {'b': 'a', 'c': 'b'}
    """
    rank = {g: i for i, g in enumerate(order)}
    pred: dict[str, list[str]] = {g: [] for g in order}
    for u in sorted(adj, key=rank.__getitem__):
        for v in adj[u]:
            pred[v].append(u)
    parent: dict[str, str] = {}
    frontier, seen = [top], {top}
    while frontier:
        nxt = []
        for p in frontier:
            for c in pred[p]:
                if c not in seen:
                    seen.add(c)
                    parent[c] = p
                    nxt.append(c)
        frontier = nxt
    missing = [g for g in order if g not in seen]
    if missing:
        raise BaselineError(f"no reduction tree into {top} {where}: {missing[0]} does not reach "
                            "it through the ranks' GPUs, directly or through switches only"
                            + (f" ({len(missing)} such GPUs)" if len(missing) > 1 else ""))
    return parent


def double_tree(topology: Topology, collective: Collective) -> Schedule:
    """Double binary tree schedule (Broadcast, Reduce, AllReduce only)."""
    if collective.kind not in TREE_KINDS:
        raise BaselineError(f"the double binary tree is for broadcast, reduce and allreduce, "
                            f"not {collective.kind.value}")
    coll = doubled(collective)
    order = ring_order(topology, [topology.gpu(r) for r in coll.ranks])
    if coll.root is not None:
        root = topology.gpu(coll.root)
        i = order.index(root)
        rest = order[i + 1:] + order[:i]
        trees = [(root, binary_tree(rest, root)), (root, binary_tree(rest[::-1], root))]
    else:
        trees = [(order[0], binary_tree(order)), (order[-1], binary_tree(order[::-1]))]
    if coll.is_reduction:
        adj = ring_neighbours(topology, order)
        where = f"in {topology.name} (a reduced partial cannot relay through a GPU)"
        trees = [(top, tree if all(p in adj[c] for c, p in tree.items())
                  else neighbour_tree(adj, top, order if k == 0 else order[::-1], where))
                 for k, (top, tree) in enumerate(trees)]
    plans = []
    for chunk in checked(coll.chunks(), TEMPLATE, every=256):
        top, tree = trees[chunk.id % 2]
        if coll.kind is CollectiveKind.BROADCAST:
            plans.append(ChunkPlan(chunk.id, top, spread=tree))
        elif coll.kind is CollectiveKind.REDUCE:
            plans.append(ChunkPlan(chunk.id, top, gather=tree))
        else:
            plans.append(ChunkPlan(chunk.id, top, gather=tree, spread=tree))
    return assemble("tree", topology, coll, plans)


MAX_FAN = 16  # fan-outs tried for switch_trees
WIDE_GPUS = 32  # GPUs beyond which switch_trees takes binary trees in WIDE_PIECES pieces
WIDE_PIECES = 512  # GB200 NVL72 64 MB: Broadcast 1.15x the bound (1.24x at 256, 1.27x at
#                    1024: each of a GPU's connections holds two sends, and at 1024 pieces
#                    the lowering needs more channels per peer than a thread block waits
#                    for); the Reduce 1.21x at 512, not lowered at 1024


def switch_trees(topology: Topology, collective: Collective) -> Schedule:
    """Broadcast or Reduce of GPUs behind one switch, pipelined down (up) ``k`` trees of
    fan-out ``k``: every piece goes down one tree, the trees in turn, in up to
    :data:`~te_ccl.baselines.disjoint.FINE_TRANSFERS` link transfers as pipeline-fine.

    Each GPU is an inner node of one tree only (tree ``t`` is the heap over the others
    rotated by ``t`` blocks of inner nodes), so it sends ``k`` copies of a ``k``-th of
    the data and receives each piece once: every GPU's link carries the data about once
    each way, the rate of the bound, and a GPU has few peers (a Reduce's sums need a
    thread block per peer; one GPU summing each piece from all the others needs more
    than a GPU runs). The fill is the trees' depth in hops, each a piece ``k`` times and
    two links' α: ``k`` is the fan-out that makes it least among those whose ``k`` blocks
    of inner nodes fit in the GPUs.

    Beyond :data:`WIDE_GPUS` GPUs the trees are binary (each GPU has two peers below it
    and one above per tree: the fewest thread blocks) in at most :data:`WIDE_PIECES`
    pieces, and a Reduce is the Broadcast of the reversed fabric played backwards: its
    partials leave in the Broadcast's pipelined order, where a GPU summing a piece's
    partials as they come waits for the slowest of them (GB200 NVL72 64 MB: 1.39x the
    bound, played backwards 1.21x)."""
    if collective.kind not in SWITCH_TREE_KINDS or collective.root is None \
            or collective.nranks < 3:
        raise BaselineError("the switch trees are for broadcast and reduce from a root")
    members = [topology.gpu(r) for r in collective.ranks]
    root = topology.gpu(collective.root)
    if any(topology.has_link(u, v) for u in members for v in members if u != v):
        raise BaselineError(f"the switch trees are for GPUs behind switches only, not "
                            f"{topology.name}'s, which have direct links")
    reach = ring_neighbours(topology, members)
    if any(set(members) - {v} - set(reach[v]) for v in members):
        raise BaselineError(f"not every GPU reaches every other through switches only in "
                            f"{topology.name}")
    wide = collective.nranks > WIDE_GPUS
    if wide and collective.kind is CollectiveKind.REDUCE:
        fan = topology.reversed()
        cast = switch_trees(fan, replace(collective, kind=CollectiveKind.BROADCAST))
        return backwards(topology, cast)
    order = ring_order(topology, members)
    at = order.index(root)
    others = order[at + 1:] + order[:at]
    hop = route(topology, root, others[0], via_gpus=False)
    links = len(hop) - 1
    alpha = sum(topology.link(u, v).latency_s for u, v in zip(hop, hop[1:], strict=False))
    rate = min(topology.link(u, v).bandwidth_Bps for u, v in zip(hop, hop[1:], strict=False))
    coll = pieces(topology, collective, 2.0,
                  min(WIDE_PIECES if wide else FINE_PIECES,
                      FINE_TRANSFERS // (links * len(others))))
    # charged its own transfers, not pipeline-fine's: GB200 NVL72's 512 pieces are 72,704,
    # about a third, and a compile whose first file took most of the limit still builds it
    fine_time_left("the switch trees' file", coll.nchunks * links * len(others))
    piece_s = coll.size_bytes / coll.nchunks / rate
    m = len(others)

    def fill(k: int) -> float:
        return _levels(m, k) * (k * piece_s + alpha)

    # fan-outs whose trees' inner nodes are all different GPUs (k blocks of inner nodes
    # fit); two GPUs below the root take two chains, each the other's reverse
    fans = [k for k in range(2, min(2 if wide else MAX_FAN, max(2, m - 1)) + 1)
            if k * -(-(m - 1) // k) <= m]
    k = min(fans, key=fill)
    inner = -(-(m - 1) // k)
    trees = []
    for t in range(k):
        shift = (t * inner) % m
        ring = others[shift:] + others[:shift]
        tree = {ring[i]: ring[(i - 1) // k] for i in range(1, m)}
        tree[ring[0]] = root
        trees.append(tree)
    plans = []
    for chunk in checked(coll.chunks(), TEMPLATE, every=256):
        tree = trees[chunk.id % k]
        if coll.kind is CollectiveKind.BROADCAST:
            plans.append(ChunkPlan(chunk.id, root, spread=tree))
        else:
            plans.append(ChunkPlan(chunk.id, root, gather=tree))
    return assemble("switch-trees", topology, coll, plans)


def _levels(m: int, k: int) -> int:
    """Levels of a heap of ``m`` nodes with fan-out ``k``.

    >>> _levels(71, 4), _levels(71, 2), _levels(1, 3)
    (4, 7, 1)
    """
    levels, width, total = 0, 1, 0
    while total < m:
        total, width, levels = total + width, width * k, levels + 1
    return levels
