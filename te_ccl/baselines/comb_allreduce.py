"""``comb-allreduce``: AllReduce on a 2D mesh summed up comb trees and broadcast back
down them, in as many pieces as the time left and the runtime allow.

ReduceScatter + AllGather sends and receives about ``2M`` at every GPU; on a mesh a
corner has two links, so it takes about ``M/b`` where the gossip bound
(:func:`te_ccl.bounds.lower_bound`) is ``2(N − 1)·M`` over the bandwidth into all GPUs,
``(n + 1)/n · M/(2b)`` on an ``n × n`` mesh. A spanning tree whose pieces are summed
toward its root and copied back carries its share once each way over each of its edges,
so trees whose shares add up to at most one on every edge meet that bound when they
take every link: the combs (:func:`~te_ccl.backends.scale.comb.comb_edges`) do. A row
comb is every row's links and one column's (its spine), a column comb every column's
links and one row's; with one of each per column and row, rooted at the middle of its
spine, and a share of ``(rows − 1)/|E|`` of the data per row comb and
``(columns − 1)/|E|`` per column comb (``|E|`` the mesh's links, counted once), every
link carries ``(N − 1)/|E|`` of the data each way: every link busy at the gossip
bound's rate.

What is left is the pipelines' fill: a piece goes up and back down its comb's depth
(about ``1.5 n`` hops), so the pieces are as many as the runtime's element limit and
:data:`~te_ccl.baselines.packed.FINE_PIECES` allow, fewer where the time left cannot
build and judge that file (:func:`~te_ccl.baselines.disjoint.fine_transfers`). Each
piece's whole tree is placed before the next one's, the combs in turn by their shares.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.backends.scale.comb import comb_edges, mesh_shape
from te_ccl.baselines.disjoint import fine_transfers
from te_ccl.baselines.packed import FINE_PIECES, pieces
from te_ccl.baselines.plan import TEMPLATE, BaselineError, ChunkPlan, assemble
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import checked
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["comb_allreduce", "combs", "combs_apply"]

Tree = dict[str, str]  # node -> parent


def combs_apply(topology: Topology, collective: Collective) -> bool:
    """Is ``collective`` an AllReduce over every GPU of a 2D mesh of at least 2 × 2?"""
    shape = mesh_shape(topology)
    return collective.kind is CollectiveKind.ALLREDUCE and shape is not None \
        and min(shape) >= 2 and collective.nranks == topology.ngpus


def combs(topology: Topology) -> list[tuple[float, str, Tree]]:
    """(share of the data, root, tree) of every comb of the 2D mesh ``topology`` (module
    docstring): the row combs, one per column, then the column combs, one per row.

    >>> from te_ccl.topology.generators import mesh
    >>> trees = combs(mesh([3, 3], 1e9))
    >>> [(round(w, 3), root, len(t)) for w, root, t in trees][:2]
    [(0.167, 'g3', 8), (0.167, 'g4', 8)]
    """
    shape = mesh_shape(topology)
    if shape is None:
        raise BaselineError(f"{topology.name} is not a 2D mesh")
    rows, cols = shape
    gpus = topology.gpus

    def name(cell: tuple[int, int]) -> str:
        return gpus[cell[0] * cols + cell[1]]

    edges = rows * (cols - 1) + cols * (rows - 1)
    out = []
    for column_first, lines, share in ((True, cols, rows - 1), (False, rows, cols - 1)):
        for line in range(lines):
            root = (rows // 2, line) if column_first else (line, cols // 2)
            tree = {name(b): name(a) for a, b, _ in comb_edges(shape, root, column_first)}
            out.append((share / edges, name(root), tree))
    return out


def comb_allreduce(topology: Topology, collective: Collective) -> Schedule:
    """The AllReduce summed up the mesh's combs and broadcast back down them (module
    docstring)."""
    if not combs_apply(topology, collective):
        raise BaselineError("the comb AllReduce is for allreduce over every GPU of a 2D mesh")
    trees = combs(topology)
    steps: dict[str, float] = defaultdict(float)  # a rank's steps per piece, on average
    for share, _, tree in trees:
        kids: dict[str, int] = defaultdict(int)
        for p in tree.values():
            kids[p] += 1
        for v in topology.gpus:
            steps[v] += share * 2 * (1 + kids[v])
    per_piece = 2 * (collective.nranks - 1)
    transfers = fine_transfers("the comb AllReduce's file", FINE_PIECES * per_piece,
                               collective.nranks * per_piece - 1)
    cut = pieces(topology, collective, max(steps.values()), max(1, transfers // per_piece))
    given = [0.0] * len(trees)
    plans = []
    for chunk in checked(cut.chunks(), TEMPLATE, every=256):
        t = min(range(len(trees)), key=lambda i: ((given[i] + 0.5) / trees[i][0], i))
        given[t] += 1
        _, root, tree = trees[t]
        plans.append(ChunkPlan(chunk.id, root, gather=tree, spread=tree))
    return assemble("comb-allreduce", topology, cut, plans, chunk_major=True)
