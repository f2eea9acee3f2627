"""A whole collective through the scale backend: sub-chunking, the epoch, reductions.

**Sub-chunking.** Each chunk is cut into ``k`` sub-chunks by compiling the collective with
``chunks_per_rank × k``: sub-chunk ``s`` of chunk ``c`` gets id ``c·k + s`` for every kind
(the chunk builders number pieces rank-major), so the lowering and the checker simply see
more, smaller chunks. Up to about :data:`PIPELINE_TARGET` chunks per link (the fill and
drain, about one link delay, then cost < 1%); on a symmetric torus ``k`` is a multiple of
the direction classes so that every class carries the same load; the smallest ``k``
whose estimated finish (receive time + one hop, or the hop diameter × (chunk time + α)
when α dominates; on a symmetric torus whose pieces take at least α, the busiest link's
whole pieces + α) is within 0.2% of the best is taken. The compile's memory caps ``k``
(:data:`~te_ccl.model.footprint.MAX_TRANSFERS` transfers, as estimated by
:func:`~te_ccl.model.footprint.most_chunks`), and so does the MSCCL reader's element limit per rank
(:mod:`te_ccl.backends.scale.msccl_budget`): beyond ~512 GPUs only one or two sub-chunks
per chunk still load (a relayed chunk is a receive and a send, or one fused step).

**Epoch.** τ = sub-chunk time on the fastest link (α not included): links are busy every
epoch and α adds ``ceil(α/τ)`` epochs of delay per hop instead of idling every epoch.

**Reductions** as in :mod:`te_ccl.compiler.solve`: ReduceScatter is the fan-out from each chunk's
owner on the reversed topology, played backwards; AllReduce is that followed by the
AllGather of the sums.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import networkx as nx

from te_ccl.backends.base import Progress, SolveParams
from te_ccl.backends.scale.alltoall import rail_shape
from te_ccl.backends.scale.comb import mesh_shape
from te_ccl.backends.scale.entry import Routes, solve_moves
from te_ccl.backends.scale.flow_alltoall import flow_subchunks
from te_ccl.backends.scale.grid_alltoall import METHOD as GRID
from te_ccl.backends.scale.hierarchical import (
    box_fabric,
    hierarchical_subchunks,
    solve_in_switch_allreduce,
)
from te_ccl.backends.scale.msccl_budget import max_subchunks, room
from te_ccl.backends.scale.symmetry import tree_leaves
from te_ccl.backends.scale.trees import MAX_GPUS as TREES_MAX_GPUS
from te_ccl.background import WORTH_FORKING, in_background, workers
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import Budget
from te_ccl.errors import SpecError
from te_ccl.model.footprint import MAX_TRANSFERS, most_chunks
from te_ccl.model.problem import (
    MAX_DELAY_EPOCHS,
    Demand,
    build_problem,
    make_problem,
    members_of,
)
from te_ccl.schedule import LazyTransfers, Schedule, SolveInfo, Transfer
from te_ccl.topology.model import Topology
from te_ccl.topology.symmetry import TorusSymmetry, torus_symmetry

__all__ = ["PIPELINE_TARGET", "scale_method", "scale_plan", "compile_scale", "crowded"]

PIPELINE_TARGET = 250
# Forwards the MSCCL lowering is assumed to fuse with their receive (one step for two);
# the rest of them need their own channels. An AllReduce fuses fewer: both phases' relays
# compete for the pairings of the same thread blocks. Its file on the 8×8×8 torus has
# 1,855 elements per rank with one sub-chunk (about half its forwards fused) and 4,047
# with two, over the 3,583 the runtime's reader leaves (the element limit).
FUSED_SHARE = 0.6
FUSED_SHARE_ALLREDUCE = 0.45


_TREE_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE,
               CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
_HIERARCHY_KINDS = _TREE_KINDS[:3]


def scale_method(topology: Topology, collective: Collective) -> str | None:
    """Which scale method fits (``symmetry``, ``trees``, ``comb``, ``greedy``,
    ``rail-alltoall``, ``flow-alltoall``, ``hierarchical``), None if none does.

    For ``--backend auto``: the greedy floods chunks to every GPU, so it is offered only
    for the copy-and-forward kinds; AlltoAll by PXN on rail-optimized clusters, else by
    concurrent-flow paths (when GPUs have no buffer limit); AllGather, ReduceScatter and
    AllReduce over every GPU of boxes on switches (rails, direct links) by the hierarchy;
    AllGather over every GPU of up to :data:`~te_ccl.backends.scale.trees.MAX_GPUS` GPUs
    by packed broadcast trees (where they beat the greedy) unless a torus symmetry applies;
    an AllReduce on a 2D mesh by comb trees where the greedy's would not load
    (:func:`crowded`).

    >>> from te_ccl.topology.generators import mesh, torus
    >>> ag = Collective(CollectiveKind.ALLGATHER, 1 << 20, tuple(range(16)))
    >>> scale_method(torus([4, 4], 1e9), ag), scale_method(mesh([4, 4], 1e9), ag)
    ('symmetry', 'trees')
    >>> scale_method(mesh([8, 8], 1e9), Collective(CollectiveKind.ALLGATHER, 1 << 20, tuple(range(64))))
    'greedy'
    """
    every = collective.nranks == topology.ngpus
    unlimited = all(n.buffer_bytes is None for n in topology.nodes)
    if collective.kind is CollectiveKind.ALLTOALL:
        if every and rail_shape(topology):
            return "rail-alltoall"
        return "flow-alltoall" if unlimited else None
    if (every and unlimited and collective.kind in _HIERARCHY_KINDS
            and box_fabric(topology) is not None):
        return "hierarchical"
    gpu_only = not topology.switches and unlimited
    if collective.kind not in _TREE_KINDS or not gpu_only:
        return None
    sym = collective.kind not in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE) and every
    if sym and torus_symmetry(topology) is not None:
        return "symmetry"
    trees = collective.kind is CollectiveKind.ALLGATHER and every
    if trees and topology.ngpus <= TREES_MAX_GPUS:
        return "trees"
    comb = every and mesh_shape(topology) is not None and crowded(topology, collective)
    return "comb" if comb else "greedy"


def _receive_time(topology: Topology, collective: Collective) -> float:
    """The longest time a GPU needs to take in its chunks over all its in-links.

    For a reduction, the chunks a GPU contributes to count (the fan-out it is the
    reversal of delivers them to it).
    """
    got: dict[int, int] = {}
    for c in collective.chunks():
        for r in (c.sources if c.reduce else c.destinations):
            got[r] = got.get(r, 0) + 1
    return max((n * collective.chunk_bytes / sum(x.bandwidth_Bps for x in
                                                 topology.in_links(topology.gpu(r)))
                for r, n in got.items()), default=0.0)


def _hops(topology: Topology) -> int:
    """Hop eccentricity of the first and last GPU (the diameter on grids)."""
    g = topology.graph()
    ends = (topology.gpus[0], topology.gpus[-1])
    return max(max(nx.single_source_shortest_path_length(g, v).values()) for v in ends)


def _steps_per_subchunk(topology: Topology, collective: Collective,
                        sym: TorusSymmetry | None) -> float:
    """MSCCL steps of a GPU per sub-chunk factor: a receive per chunk it gets (or,
    reversed, contributes) and as many sends, less the forwards the lowering fuses with
    their receive (``rcs``/``rrs``), plus one per neighbour its own chunks leave for;
    AllReduce lowers both phases. Forwards are known on a symmetric torus (every node
    of the broadcast tree but its leaves forwards, and translation makes every GPU see
    every node once), of which :data:`FUSED_SHARE` count as fused
    (:data:`FUSED_SHARE_ALLREDUCE` in an AllReduce); elsewhere none."""
    degree = max(len(topology.out_links(g)) for g in topology.gpus)
    allreduce = collective.kind is CollectiveKind.ALLREDUCE
    phases, share = (2, FUSED_SHARE_ALLREDUCE) if allreduce else (1, FUSED_SHARE)
    n = collective.nranks
    fused = share * (n - 1 - tree_leaves(sym)) if sym and n == topology.ngpus else 0
    return phases * collective.chunks_per_rank * (2 * (n - 1) - fused + degree)


def _subchunks(topology: Topology, collective: Collective, room: int) -> int:
    """The smallest ``k`` within 0.2% of the best estimate, up to about PIPELINE_TARGET
    chunks per link, at most ``room`` (the compile's memory) and within what the MSCCL
    runtime can load (:func:`max_subchunks`); on a torus a multiple of its direction
    classes where that fits, else any ``k``."""
    n, k0 = collective.nranks, collective.chunks_per_rank
    sym = torus_symmetry(topology)
    if sym is not None and n == topology.ngpus:
        step = len(sym.group)
        top = step * math.ceil(PIPELINE_TARGET / ((n - 1) * k0))
    else:
        indeg = min(len(topology.in_links(g)) for g in topology.gpus)
        step = 1
        top = math.ceil(PIPELINE_TARGET * indeg / max(1, (n - 1) * k0))
    loadable = max_subchunks(n, _steps_per_subchunk(topology, collective, sym))
    step = step if step <= loadable else 1
    ks = [k for k in range(step, min(top, loadable) + 1, step)
          if k <= room and collective.size_bytes // (collective.nchunks * k) >= 1] or [1]
    receive, hops = _receive_time(topology, collective), _hops(topology)
    b = max(link.bandwidth_Bps for link in topology.links)
    alpha = max(link.latency_s for link in topology.links)
    hop = {k: collective.chunk_bytes / k / b + alpha for k in ks}
    # a symmetric torus's GPUs all send their own pieces at once, so its links are busy
    # from the start; where a piece takes at least α, no relay leaves a gap and the
    # busiest link ends with its whole pieces plus α: more, smaller pieces gain nothing
    busy = sym is not None and n == topology.ngpus
    tail = {k: _whole_pieces(receive, hop[k] - alpha) - receive + alpha
            if busy and hop[k] >= 2 * alpha else hop[k] for k in ks}
    # estimated finish: the receive time plus its tail, or the diameter in hops
    times = {k: max(receive + tail[k], hops * hop[k]) for k in ks}
    best = min(times.values())
    return min(k for k, t in times.items() if t <= best * 1.002)


def _whole_pieces(receive: float, piece: float) -> float:
    """``receive`` rounded up to whole pieces of ``piece`` seconds on a link: a link
    carries whole sub-chunks, so one that gets a share of the next is busy a piece longer.

    >>> _whole_pieces(15.75, 1.0), _whole_pieces(15.75, 0.25), _whole_pieces(16.0, 1.0)
    (16.0, 15.75, 16.0)
    """
    return math.ceil(receive / piece - 1e-9) * piece


def scale_plan(topology: Topology, collective: Collective, cap: int | None = None
               ) -> tuple[Collective, float, int]:
    """(sub-chunked collective, epoch τ in seconds, factor k) for the scale backend;
    ``k`` at most ``cap`` when given (``SolveParams.max_subchunks``).

    >>> from te_ccl.topology.generators import torus
    >>> c = Collective(CollectiveKind.ALLGATHER, 1 << 20, tuple(range(16)))
    >>> sub, tau, k = scale_plan(torus([4, 4], 50e9), c)
    >>> k, sub.chunks_per_rank, round(sub.chunk_bytes, 1), tau == sub.chunk_bytes / 50e9
    (4, 4, 16384, True)
    """
    if collective.kind in (CollectiveKind.CUSTOM,) or not collective.ranks:
        raise SpecError("the scale backend compiles the standard collectives only",
                        key="collective")
    method = scale_method(topology, collective)
    room = most_chunks(topology, collective) // collective.chunks_per_rank
    if method == "hierarchical":
        k = hierarchical_subchunks(topology, collective, room)
    elif method == "flow-alltoall":
        k = flow_subchunks(topology, collective, MAX_TRANSFERS)
    else:
        k = _subchunks(topology, collective, room)
    k = min(k, cap or k)
    sub = replace(collective, chunks_per_rank=collective.chunks_per_rank * k)
    fastest = max(link.bandwidth_Bps for link in topology.links)
    # tiny sub-chunks: no hop may take more epochs than a model holds
    slowest = max(link.transfer_time_s(sub.chunk_bytes) for link in topology.links)
    return sub, max(sub.chunk_bytes / fastest, slowest / MAX_DELAY_EPOCHS), k


def _fan_out(topology: Topology, c: Collective, owner: dict[int, int], tau: float,
             reverse: bool):
    """Chunk ``i`` from ``owner[i]`` to its other ranks (on the reversed graph if ``reverse``)."""
    demands = []
    for x in c.chunks():
        ranks = x.sources if reverse else x.destinations
        dests = tuple(topology.gpu(r) for r in ranks if r != owner[x.id])
        if dests:
            demands.append(Demand(x.id, (topology.gpu(owner[x.id]),), dests))
    topo = topology.reversed() if reverse else topology
    return make_problem(topo, c.chunk_bytes, tuple(demands), epoch_s=tau, tree=reverse,
                        members=members_of(topology, c))


def crowded(topology: Topology, sub: Collective) -> bool:
    """Does an AllReduce's estimate of a rank's steps (:func:`_steps_per_subchunk`, no
    forward fused) exceed what the runtime's reader holds? The greedy's routes branch
    most at the ranks feeding a mesh's corners, whose files then need more elements than
    the reader keeps (mesh 32×32: 4,088 of 4,096 at rank 960 with every fusion made, the
    schedule's timing given up), so both phases take comb trees where they apply
    (:mod:`~te_ccl.backends.scale.comb`), which branch evenly."""
    return (sub.kind is CollectiveKind.ALLREDUCE
            and _steps_per_subchunk(topology, sub, None) > room(sub.nranks))


def _solve(topology: Topology, sub: Collective, tau: float, params: SolveParams, budget: Budget,
           progress: Progress | None) -> tuple[list[Transfer] | LazyTransfers, str, tuple[str, ...]]:
    """(transfers, status, notes) of the sub-chunked collective."""
    if not sub.is_reduction:
        moves, method, notes = solve_moves(build_problem(topology, sub, tau), params, budget,
                                           progress)
        # the grid's file is lowered from its plan: the transfers wait for a reader (other
        # files' lowering reads them at once, so they are built before a checker forks)
        return (moves.lazy() if method == GRID else moves.transfers()), f"scale/{method}", notes
    in_switch = solve_in_switch_allreduce(topology, sub, tau)
    if in_switch is not None:
        transfers, notes = in_switch
        if progress:
            progress(f"scale: hierarchical in-switch, {len(transfers)} transfers "
                     f"({budget.elapsed():.1f} s)")
        return transfers, "scale/hierarchical", notes
    owner = sub.reduction_owners()
    # no packed trees for reductions: their two phases' files need more steps per
    # connection than the runtime holds at the sub-chunking the greedy's fit in
    routes: Routes = "comb" if crowded(topology, sub) else "greedy"
    solve = partial(solve_moves, params=params, budget=budget, routes=routes)
    both = sub.kind is CollectiveKind.ALLREDUCE
    gather = _fan_out(topology, sub, owner, tau, False) if both else None
    # a large AllReduce's all-gather is solved in a forked process beside its reduce-scatter
    forked = in_background(solve, gather) if both and workers() > 1 \
        and sub.nranks ** 2 * sub.chunks_per_rank >= WORTH_FORKING else None
    first, method, notes = solve(_fan_out(topology, sub, owner, tau, True), progress=progress)
    transfers = first.transfers(reverse_at=first.finish)
    notes = tuple(f"reduce-scatter: {n}" for n in notes + (
        "the fan-out on the reversed topology played backwards",))
    if gather is not None:
        second, _, more = forked.result() if forked else solve(gather, progress=progress)
        transfers += second.transfers(shift=first.finish)
        notes += tuple(f"all-gather: {n}" for n in more)
    return transfers, f"scale/{method}", notes


def compile_scale(topology: Topology, collective: Collective, params: SolveParams | None = None,
                  progress: Progress | None = None) -> Schedule:
    """``collective`` on ``topology`` by the scale backend, as a Schedule of the sub-chunked collective."""
    params = params or SolveParams()
    budget = Budget.of(params.time_limit_s)
    sub, tau, k = scale_plan(topology, collective, params.max_subchunks)
    transfers, status, notes = _solve(topology, sub, tau, params, budget, progress)
    note = (f"sub-chunking: {k} sub-chunks per chunk ({sub.chunks_per_rank} per rank, "
            f"{sub.chunk_bytes} bytes), epoch {tau:.4g} s = sub-chunk time on the fastest link",)
    info = SolveInfo(backend="scale", solver_time_s=round(budget.elapsed(), 4), optimal=False,
                     status=f"{status}: feasible (not proven optimal)", notes=note + notes,
                     subchunks=k)
    lazy = isinstance(transfers, LazyTransfers)
    return Schedule(topology, sub, tau, transfers if lazy else tuple(transfers), info)
