"""Link-disjoint spanning trees of a torus, one per link out of the root, as shallow as
the torus allows.

A pipelined Broadcast down ``k`` trees finishes about ``(D − 1)`` piece times after the
root's links fall silent, ``D`` the trees' depth. On a torus every GPU has ``k`` links in
and ``k`` trees must each take one of them, so the trees use every link but the root's
incoming ones; grown greedily (:func:`te_ccl.baselines.disjoint.disjoint_trees`, layer by
layer) the last trees get what is left and go deep (16×16: 23 hops against a diameter of
16). Here the trees are one tree ``T`` turned by the torus's symmetries that fix the root
and move its ``k`` links onto each other (axis shifts × sign,
:func:`te_ccl.topology.symmetry.torus_symmetry`): ``T`` turned by each of them is a tree
from another of the root's links, and the ``k`` trees share no link exactly when, at
every GPU, the links into it that ``T`` and its turns take differ. ``T`` is chosen by
CP-SAT: one parent per GPU, those link constraints, every GPU at most ``H`` hops deep,
for the least ``H`` from the diameter up that it finds (diameter + 1 on the shipped tori,
the least there is where the sides are even: a GPU next to the farthest one has a link in
from it, and the tree that takes it reaches that GPU a hop after the farthest).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import numpy as np

from te_ccl.deadline import left
from te_ccl.topology.model import Topology
from te_ccl.topology.symmetry import torus_symmetry

__all__ = ["MAX_EXTRA_DEPTH", "torus_trees"]

MAX_EXTRA_DEPTH = 2  # hops beyond the diameter tried before giving up
SOLVE_WORK = 5.0  # CP-SAT's deterministic time per depth tried (the shipped tori take 0.05):
#                   the same trees on any machine

Tree = dict[str, str]  # node -> parent
Vec = tuple[int, ...]


def torus_trees(topology: Topology, root: str, members: list[str]) -> list[Tree] | None:
    """``k`` link-disjoint spanning trees of a torus with equal sides of at least 3 and
    identical links, each from another of ``root``'s ``k`` links, at most the diameter and
    :data:`MAX_EXTRA_DEPTH` deep (module docstring); None where ``members`` are not all
    its GPUs or no such trees are found.

    >>> from te_ccl.baselines.plan import depth
    >>> from te_ccl.topology.generators import torus
    >>> net = torus([4, 4], 1e9)
    >>> trees = torus_trees(net, "g0", net.gpus)
    >>> len(trees), max(depth(t, v) for t in trees for v in t)
    (4, 5)
    """
    sym = torus_symmetry(topology)
    if sym is None or set(members) != set(topology.gpus) or sym.dims[0] < 3:
        return None
    side, ndim = sym.dims[0], len(sym.dims)
    classes = [np.array(c) for c in sym.classes]
    # the group element that takes the root's first link to its link c, for every c
    turns = [next(g for g in sym.group if g[0] == c) for c in range(len(classes))]
    origin = np.unravel_index(sym.names.index(root), sym.dims)

    def turn(g: tuple[int, ...], x: Vec) -> Vec:
        return tuple(int(v) % side for v in sum(x[a] * classes[g[a]] for a in range(ndim)))

    for height in range(ndim * (side // 2), ndim * (side // 2) + MAX_EXTRA_DEPTH + 1):
        parents = _one_tree(side, ndim, classes, turns, turn, height)
        if parents is not None:
            break
    else:
        return None

    def name(x: Vec) -> str:
        return sym.names[int(sym.rank(np.array(x) + origin))]

    return [{name(turn(g, v)): name(turn(g, u)) for v, u in parents.items()} for g in turns]


def _one_tree(side: int, ndim: int, classes: list[np.ndarray], turns: list[tuple[int, ...]],
              turn: Callable[[tuple[int, ...], Vec], Vec], height: int
              ) -> dict[Vec, Vec] | None:
    """``T`` of the module docstring, at most ``height`` hops deep, as node -> parent in
    coordinates from the root; None where CP-SAT proves there is none or gives up."""
    from ortools.sat.python import cp_model  # here: its import (with pandas) would slow
    #                                           every compile's start, most build no torus trees

    nodes = list(itertools.product(range(side), repeat=ndim))
    root = nodes[0]
    k = len(classes)

    def step(x: Vec, c: int, sign: int) -> Vec:
        return tuple(int(v) % side for v in np.array(x) + sign * classes[c])

    model = cp_model.CpModel()
    into = {(v, c): model.new_bool_var(f"in{v}{c}") for v in nodes[1:] for c in range(k)}
    hops = {v: model.new_int_var(int(v != root), height if v != root else 0, f"d{v}")
            for v in nodes}
    for v in nodes[1:]:
        model.add_exactly_one(into[v, c] for c in range(k))
        for c in range(k):  # v's parent is v - class c, one hop shallower
            model.add(hops[v] >= hops[step(v, c, -1)] + 1).only_enforce_if(into[v, c])
    back = [next(h for h in turns if all(h[g[c]] == c for c in range(k))) for g in turns]
    for w in nodes:  # the link into w of class c: in one turn of T at most
        for c in range(k):
            takers = Counter((turn(h, w), h[c]) for h in back)
            for v, cc in takers:
                if v != root and takers[v, cc] > 1:  # two turns would take it with T
                    model.add(into[v, cc] == 0)
            model.add_at_most_one(into[v, cc] for v, cc in takers if v != root)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = SOLVE_WORK
    if left() < float("inf"):
        solver.parameters.max_time_in_seconds = left()
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return {v: step(v, c, -1) for v in nodes[1:] for c in range(k) if solver.value(into[v, c])}

