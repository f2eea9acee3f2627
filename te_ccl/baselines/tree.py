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

from te_ccl.baselines.cycle import ring_neighbours
from te_ccl.baselines.plan import TEMPLATE, BaselineError, ChunkPlan, assemble
from te_ccl.baselines.ring import doubled, ring_order
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import checked
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["binary_tree", "double_tree"]

TREE_KINDS = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE, CollectiveKind.ALLREDUCE)


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
