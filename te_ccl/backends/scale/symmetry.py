"""Torus symmetry: schedule one source's broadcast, translate it to every source.

On a torus with equal sides every node looks the same (translations), and the group
``G`` of axis rotations × sign flip maps each direction class (``±e_i``) to every other
exactly once. Source 0 sends its ``j``-th chunk down the shortest-path tree ``g_j(T)``
(``g_j = G[j mod |G|]``); summed over the orbit each class carries exactly ``N − 1``
tree edges per ``|G|`` chunks. Translating source 0's schedule to source ``s`` puts, on
the physical link ``u → u + e`` at epoch ``t``, one chunk per class-``e`` tree edge that
source 0 starts at ``t``: the whole AllGather is feasible iff the orbit schedule starts
at most ``capacity`` edges of each class per epoch. With ``|G|·m`` chunks per source each
link carries ``(N − 1)·m`` chunks of ``C/(|G|·m)`` bytes — exactly the cut bound.

The orbit schedule (:mod:`te_ccl.backends.scale.orbit`) is a small scheduling problem;
this module builds its trees; :mod:`te_ccl.topology.symmetry` finds the group and
translates the result.
"""

from __future__ import annotations

import numpy as np

from te_ccl.topology.symmetry import TorusSymmetry, Vec

__all__ = ["orbit_trees", "tree_leaves"]


def _bfs_tree(sym: TorusSymmetry) -> list[tuple[Vec, int]]:
    """Shortest-path tree from the origin as (tail offset, class) edges in BFS order.

    Layer by layer, every node of a layer first takes one child where it can (a greedy
    matching, :func:`_one_child_each`): a node with a child forwards what it receives,
    which the MSCCL lowering fuses into one step (``rcs``/``rrs``), so a tree with few
    leaves lowers to few steps (8×8×8 torus: 117 leaves, against 195 when every node
    just took the least-used class). The other nodes of the next layer then take, among
    equally short parents, the class used least so far, so the tree stays balanced
    (class loads within one edge: short drains on every class).
    """
    n, origin = sym.dims[0], tuple(0 for _ in sym.dims)
    seen, frontier, edges = {origin}, [origin], []
    used = [0] * len(sym.classes)
    came: dict[Vec, int] = {}  # class of the edge into each node
    while frontier:
        offers: dict[Vec, list[tuple[Vec, int]]] = {}
        for u in frontier:
            for ci, e in enumerate(sym.classes):
                v = tuple((a + b) % n for a, b in zip(u, e, strict=True))
                if v not in seen:
                    offers.setdefault(v, []).append((u, ci))
        parent = _one_child_each(frontier, offers, used, came)
        for v, choices in sorted(offers.items()):
            if v not in parent:
                parent[v] = min(choices, key=lambda uc: (used[uc[1]], uc[1]))
                used[parent[v][1]] += 1
        for v in sorted(offers):
            edges.append(parent[v])
            came[v] = parent[v][1]
            seen.add(v)
        frontier = sorted(offers)
    return edges


def _one_child_each(frontier: list[Vec], offers: dict[Vec, list[tuple[Vec, int]]],
                    used: list[int], came: dict[Vec, int]) -> dict[Vec, tuple[Vec, int]]:
    """A child for as many nodes of ``frontier`` as a greedy matching finds: each pick
    takes the least-used class, then a parent that goes on straight (a chain of fused
    steps through it pairs its peers the same way on every GPU), then the parent with
    the fewest unclaimed children."""
    free: dict[Vec, set[tuple[Vec, int]]] = {u: set() for u in frontier}
    for v, choices in offers.items():
        for u, ci in choices:
            free[u].add((v, ci))
    parent: dict[Vec, tuple[Vec, int]] = {}
    while True:
        pairs = [(used[ci], came.get(u) != ci, len(kids), u, v, ci)
                 for u, kids in free.items() for v, ci in kids]
        if not pairs:
            return parent
        *_, u, v, ci = min(pairs)
        parent[v] = (u, ci)
        used[ci] += 1
        del free[u]
        for w, _ in offers[v]:
            if w in free:
                free[w] = {(x, c) for x, c in free[w] if x != v}


def tree_leaves(sym: TorusSymmetry) -> int:
    """Leaves of the broadcast tree (the same for every group element): the nodes that
    receive a chunk without forwarding it.

    >>> from te_ccl.topology.generators import torus
    >>> from te_ccl.topology.symmetry import torus_symmetry
    >>> tree_leaves(torus_symmetry(torus([8, 8], 1e9)))
    14
    """
    tails = {tail for tail, _ in _bfs_tree(sym)}
    return int(np.prod(sym.dims)) - len(tails)


def orbit_trees(sym: TorusSymmetry) -> list[list[tuple[Vec, int]]]:
    """The tree of each group element: ``g(T)`` as (tail offset, class) edges, parents first."""
    tree = _bfs_tree(sym)
    out = []
    for g in sym.group:
        out.append([(_apply(sym, g, tail), g[ci]) for tail, ci in tree])
    return out


def _apply(sym: TorusSymmetry, g: tuple[int, ...], vec: Vec) -> Vec:
    """Map an offset by the group element ``g`` (linear on the class vectors)."""
    out = np.zeros(len(sym.dims), dtype=np.int64)
    for axis, x in enumerate(vec):
        out += x * np.array(sym.classes[g[axis]])
    return tuple(int(v) for v in out % sym.dims[0])
