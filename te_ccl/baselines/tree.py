"""NCCL's double binary tree for Broadcast, Reduce and AllReduce.

Two binary trees over the ranks in ring order (so tree edges tend to be short): the
second is the first built on the reversed order, so most inner nodes of one tree are
leaves of the other and both halves of the data use different links. Chunks alternate
between the trees (the collective is cut into twice as many chunks). Broadcast and Reduce
hang each tree under the root; AllReduce reduces up to each tree's top and broadcasts
back down.
"""

from __future__ import annotations

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
