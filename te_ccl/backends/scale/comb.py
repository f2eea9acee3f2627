"""Comb trees on a 2D mesh: every chunk along its source's column, then along every row
(or its row, then every column), the greedy timing them on those routes only.

The greedy's own routes branch where they happen to: on mesh 32×32 AllGather a rank
that feeds a corner sends up to 313 times a chunk it has already sent once, where a rank
of a comb sends again only the chunks whose spine it is on (the rib's two directions,
three at the source): at most 65 at any rank. An AllReduce lowers both phases, and the
greedy's fullest rank then needs more elements than the MSCCL runtime's reader keeps for
a rank; the combs' ranks all fit.
Half the sources start down their column, half along their row (a checkerboard of
sources, alternating again over a source's chunks), so every row and column link carries
the same load as the cut bound's: on mesh 32×32 the busiest link 511.5 chunks, the cut
bound of the corners' two in-links. Each link prefers the chunk whose subtree below the
far end is deepest (the pipelines' critical path): mesh 32×32 AllGather lands at 515
epochs for a bound of 511.5 (the greedy's own routes: 514).

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.model.problem import build_problem
>>> from te_ccl.topology.generators import mesh
>>> p = build_problem(mesh([4, 4], 1e9), Collective(CollectiveKind.ALLGATHER, 16000, tuple(range(16))))
>>> moves, _ = solve_comb(p)
>>> len(moves), moves.finish  # 16 chunks to 15 GPUs each; the corners' cut bound is 7.5
(240, 8)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from te_ccl.backends.scale import bitsets
from te_ccl.backends.scale.greedy import greedy_transfers, net_of
from te_ccl.backends.scale.moves import Moves
from te_ccl.backends.scale.trees import spanning_demands
from te_ccl.deadline import checked
from te_ccl.model.problem import Problem
from te_ccl.topology.model import Topology

__all__ = ["mesh_shape", "comb_edges", "solve_comb"]

COMBING = "building comb trees"  # what a deadline reached interrupted

Cell = tuple[int, int]


def mesh_shape(topology: Topology) -> tuple[int, int] | None:
    """``(rows, columns)`` of a 2D mesh with ranks row-major and links both ways between
    grid neighbours only (checked, not just read from the generator's name), else None.

    >>> from te_ccl.topology.generators import mesh, torus
    >>> mesh_shape(mesh([2, 3], 1e9)), mesh_shape(torus([3, 3], 1e9))
    ((2, 3), None)
    """
    dims = topology.meta.get("dims") if topology.meta.get("generator") == "mesh" else None
    if not dims or len(dims) != 2 or topology.switches:
        return None
    rows, cols = dims
    gpus = topology.gpus
    if len(gpus) != rows * cols:
        return None
    want = set()
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0)):
                if r + dr < rows and c + dc < cols:
                    u, v = gpus[r * cols + c], gpus[(r + dr) * cols + c + dc]
                    want |= {(u, v), (v, u)}
    return (rows, cols) if {(k.src, k.dst) for k in topology.links} == want else None


def comb_edges(shape: tuple[int, int], source: Cell, column_first: bool
               ) -> list[tuple[Cell, Cell, int]]:
    """The comb from ``source``: ``(from, to, height)`` per edge, ``height`` the hops from
    ``to`` to its deepest descendant. The spine runs along the source's column (its row
    if not ``column_first``), a rib from every spine cell along its row (column).

    >>> sorted(comb_edges((2, 2), (0, 0), True))
    [((0, 0), (0, 1), 0), ((0, 0), (1, 0), 1), ((1, 0), (1, 1), 0)]
    """
    along = 0 if column_first else 1  # the spine's axis
    n_spine, n_rib = shape[along], shape[1 - along]
    s_spine, s_rib = source[along], source[1 - along]
    rib_depth = max(s_rib, n_rib - 1 - s_rib)

    def cell(spine: int, rib: int) -> Cell:
        return (spine, rib) if column_first else (rib, spine)

    out = []
    for t in range(n_spine):
        if t != s_spine:
            step = 1 if t > s_spine else -1
            beyond = n_spine - 1 - t if step > 0 else t
            out.append((cell(t - step, s_rib), cell(t, s_rib), beyond + rib_depth))
        for u in range(n_rib):
            if u != s_rib:
                step = 1 if u > s_rib else -1
                beyond = n_rib - 1 - u if step > 0 else u
                out.append((cell(t, u - step), cell(t, u), beyond))
    return out


def solve_comb(problem: Problem, deadline: Callable[[], bool] = lambda: False
               ) -> tuple[Moves, tuple[str, ...]] | None:
    """(moves, notes) along comb trees when ``problem`` is every GPU of a 2D mesh
    broadcasting its chunks to all others, else None (see the module docstring).
    Raises SolverError once ``deadline()`` turns true."""
    shape = mesh_shape(problem.topology)
    sources = spanning_demands(problem)
    if shape is None or sources is None:
        return None
    net = net_of(problem)
    link = net.link_index()
    gpus, cols = problem.topology.gpus, shape[1]
    position = {g: divmod(i, cols) for i, g in enumerate(gpus)}
    order = sorted(c for cs in sources.values() for c in cs)
    bit = {c: b for b, c in enumerate(order)}
    routes: tuple[list[int], list[int]] = ([], [])
    by_height: dict[int, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for s, cs in checked(sources.items(), COMBING, every=16):
        r, c = position[s]
        for j, chunk in enumerate(sorted(cs)):
            for a, b, height in comb_edges(shape, (r, c), (r + c + j) % 2 == 0):
                e = link[(gpus[a[0] * cols + a[1]], gpus[b[0] * cols + b[1]])]
                for rows_, bits in (routes, by_height[height]):
                    rows_.append(e)
                    bits.append(bit[chunk])
    nlinks = len(net.src)
    tiers = tuple(bitsets.from_pairs(nlinks, len(order), *by_height[h])
                  for h in sorted(by_height, reverse=True))
    moves = greedy_transfers(problem, order, deadline=deadline, tiers=tiers,
                             routes=bitsets.from_pairs(nlinks, len(order), *routes))
    return moves, (f"comb trees on the {shape[0]}×{shape[1]} mesh (column or row first by "
                   "source), deepest subtree first",)
