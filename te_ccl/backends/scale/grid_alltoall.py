"""AlltoAll on a mesh or torus in dimension order, relayed in groups one step carries.

A rank's chunks travel one dimension after the other, the slowest (largest rank stride)
first. In the phase of dimension ``p`` a rank holds *bundles*: the chunks of one source
for every rank that shares the holder's coordinates before ``p``, in contiguous slots
ordered by destination rank. Along ``p`` a bundle has one *element* per coordinate
(``E_p`` = the ranks of the faster dimensions × chunks per pair). The holder keeps its own
element; the others leave in *groups*: the elements ahead in one direction (shortest way
round a torus ring; its antipode by the holder's parity), contiguous in slots and at most
``max_count − 1`` chunks, so one step carries a group. A group is received into scratch
at every rank on its way, which keeps its first element when it is that rank's (a bundle
for the next phase, or at the last phase its chunk, copied to the output) and sends the
rest on.

Steps per rank stay far below the reader's limit where one step per chunk and hop does
not fit (mesh 16×16: the concurrent-flow routes give rank 120 4,069 receives, over the
3,838 steps the reader holds; here 2,212 elements in all, :func:`grid_elements`). Every step moves one group over one link,
so the file is deadlock-free by construction: every thread block takes its transfers in
the order one list schedule starts them (:func:`_order`), and a step waits only for a
receive that started before it.

The schedule (:func:`solve_grid_alltoall`) has the same transfers chunk by chunk, each
group store-and-forward on its links in that order; the file is timed by its own replay.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from te_ccl.backends.scale.grid import (
    BUFFERS,
    OPS,
    PER_CHANNEL,
    GridPlan,
    channels,
    grid_alpha,
    grid_moves,
    grid_shape,
    neighbour,
    overflow,
)
from te_ccl.backends.scale.grid import coords as _coords
from te_ccl.backends.scale.moves import Moves
from te_ccl.collective.model import Collective
from te_ccl.deadline import check
from te_ccl.model.problem import Problem
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.topology.model import Topology

__all__ = ["BUFFERS", "OPS", "GridPlan", "grid_shape", "grid_plan",
           "grid_hops", "grid_elements", "grid_alpha", "solve_grid_alltoall", "grid_takes",
           "METHOD", "GRID_FROM_HOPS"]

METHOD = "grid-alltoall"
PLANNING = "planning the grid AlltoAll"  # what a deadline reached interrupted
GRID_FROM_HOPS = 200_000  # chunk-hops from which a file of one step per chunk and hop is no
#                           first file: torus 16×16's 524,288 took the lowering about 100 s
#                           under load, and mesh 16×16's busiest rank (696,320) overflows
LAST_GROUP = 4  # elements a group of the last phase carries at most (see _per_group)


def _per_group(e: int, last: bool, limits: RuntimeLimits) -> int:
    """Elements of ``e`` chunks a group carries: one before the last phase (a bundle then
    reaches every rank of its line soon, which starts the next phase sooner), at most
    :data:`LAST_GROUP` in the last (short groups keep store-and-forward pipelined: a line
    of 16 then keeps its middle link busy throughout), within a step's ``max_count − 1``."""
    return max(1, min(LAST_GROUP if last else 1, (limits.max_count - 1) // e))


def _groups(c: int, d: int, wrap: bool, per_group: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """(direction, [(coordinate, hops)]) of the elements a holder at coordinate ``c`` of a
    line or ring of ``d`` sends: runs contiguous in slots, at most ``per_group`` each."""
    if wrap:
        half = (d - 1) // 2
        ahead = {1: list(range(1, half + 1)), -1: list(range(1, half + 1))}
        if d % 2 == 0:  # the antipode: one way from even holders, the other from odd
            ahead[1 if c % 2 == 0 else -1].append(d // 2)
    else:
        ahead = {1: list(range(1, d - c)), -1: list(range(1, c + 1))}
    out = []
    for step, hops in ahead.items():
        run: list[tuple[int, int]] = []
        for h in hops:
            x = (c + step * h) % d
            if run and (x - run[-1][0] != step or len(run) == per_group):
                out.append((step, run))
                run = []
            run.append((x, h))
        if run:
            out.append((step, run))
    return out


def grid_plan(dims: tuple[int, ...], wrap: bool, k: int, alpha: float = 0.0,
              limits: RuntimeLimits = MSCCL) -> GridPlan | str:
    """The file of the grid AlltoAll with ``k`` chunks per pair, or why none fits
    ``limits`` (an element over ``max_count − 1`` chunks; more channels, thread blocks or
    elements per rank than the runtime holds). Built once for the schedule and its
    lowering (which runs in a process forked after the schedule was built)."""
    return _plan(tuple(dims), wrap, k, alpha, limits)


@lru_cache(maxsize=2)
def _plan(dims: tuple[int, ...], wrap: bool, k: int, alpha: float,
          limits: RuntimeLimits) -> GridPlan | str:
    """:func:`grid_plan`, its arguments as one key."""
    m, n = len(dims), math.prod(dims)
    stride = [math.prod(dims[p + 1:]) for p in range(m)]
    size = [s * k for s in stride]
    if size[0] > limits.max_count - 1:
        return (f"an element of {size[0]} chunks (the ranks behind the slowest dimension "
                f"× {k}) is more than a step carries ({limits.max_count - 1})")
    need, v = grid_elements(dims, wrap, k, limits)
    if need > limits.max_elements:
        return (f"its rank {v} reads {need:,} XML elements, more than the "
                f"{limits.max_elements} the runtime's reader holds")
    t = _Transfers()
    copies: list[tuple[int, int, int, int, int]] = []  # rank, buffer, offset, output, after
    scratch = [0] * n
    # bundles: (holder, source, buffer, offset, first rank, the transfer that brought it)
    bundles = [(v, v, 0, 0, 0, -1) for v in range(n)]
    gid = 0
    for p in range(m):
        check(PLANNING)
        d, e, last = dims[p], size[p], p == m - 1
        following = []
        for v, s, buf, off, rank0, filled in bundles:
            c = _coords(v, dims)[p]
            own = off + c * e
            if not last:
                following.append((v, s, buf, own, rank0 + c * stride[p], filled))
            else:
                copies.append((v, buf, own, s * k, filled))
            for step, elements in _groups(c, d, wrap, _per_group(e, last, limits)):
                gid += 1
                lo = min(x for x, _ in elements)
                cnt, sbuf, soff, u, ready = len(elements) * e, buf, off + lo * e, v, filled
                chunk = (s * n + rank0 + lo * stride[p]) * k  # the group's first chunk id
                far = elements[-1][1]
                for hop in range(1, far + 1):
                    w = neighbour(u, p, step, dims, wrap)
                    got = scratch[w]
                    scratch[w] += cnt
                    prio = (hop - far if last else -hop) * _GIDS + gid
                    ready = t.add(prio, u, w, cnt, sbuf, soff, got, ready, chunk)
                    sbuf, soff, u = 2, got, w
                    if elements[0][1] == hop:  # w keeps its element
                        x = elements.pop(0)[0]
                        kept = got if step == 1 else got + cnt - e
                        if step == 1:
                            soff, chunk = got + e, chunk + e
                        cnt -= e
                        if last:
                            copies.append((w, 2, kept, s * k, ready))
                        else:
                            following.append((w, s, 2, kept, rank0 + x * stride[p], ready))
                    if not elements:
                        break
        bundles = following
    return _assemble(n, k, t, copies, scratch, limits, alpha)


_GIDS = 1 << 32  # groups fewer than this: a priority is (hops) · _GIDS + group


class _Transfers:
    """Group transfers as columns, in the order they are made."""

    def __init__(self) -> None:
        self.cols: tuple[list[int], ...] = tuple([] for _ in range(9))

    def add(self, prio: int, u: int, w: int, cnt: int, sbuf: int, soff: int, doff: int,
            after: int, chunk: int) -> int:
        """Add one (``after``: the transfer it waits for, −1 none); returns its row."""
        for col, x in zip(self.cols, (prio, u, w, cnt, sbuf, soff, doff, after, chunk),
                          strict=True):
            col.append(x)
        return len(self.cols[0]) - 1

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.array(c, dtype=np.int64) for c in self.cols)


def _assemble(n: int, k: int, t: _Transfers, copies: list[tuple[int, int, int, int, int]],
              scratch: list[int], limits: RuntimeLimits, alpha: float) -> GridPlan | str:
    """Channels per link (as few as hold :data:`PER_CHANNEL` transfers each, dealt in
    start order round-robin: the channels of a link run at once, so neighbours in the
    order stay close in time; in blocks of consecutive transfers the later blocks raced
    the earlier ones, mesh 16×16 64 MB replayed 2.23× the bound against 1.75×), thread
    blocks (receiving ones first: the waited-for ids stay small), steps in start order,
    dependencies; or why the runtime cannot hold it. A send waits for the receive that
    brought its chunks; a copy follows that receive in its thread block."""
    check(PLANNING)
    _, u, w, cnt, sbuf, soff, doff, after, chunk = t.arrays()
    link = u * n + w
    waiting = np.flatnonzero(after >= 0)
    dealt = channels(t.cols[0], link, t.cols[3], np.stack([waiting, after[waiting]], axis=1),
                     alpha, limits)
    if isinstance(dealt, str):
        return dealt
    position, finish, chan, nchannels = dealt
    nt = len(u)
    c_rank, c_buf, c_off, c_out, c_after = (np.array(x, dtype=np.int64).reshape(-1)
                                            for x in zip(*copies, strict=True))
    brought = c_after >= 0
    ca = np.where(brought, c_after, 0)
    # per step: rank, block kind (0 receives, 1 sends, 2 local), peer (n: none), channel, key
    rank = np.concatenate([u, w, c_rank])
    kind = np.concatenate([np.ones(nt), np.zeros(nt), np.where(brought, 0, 2)]).astype(np.int64)
    peer = np.concatenate([w, u, np.where(brought, u[ca], n)])
    chans = np.concatenate([chan, chan, np.where(brought, chan[ca], 0)])
    key = np.concatenate([2 * position, 2 * position, np.where(brought, 2 * position[ca] + 1, -1)])
    code = (kind * (n + 1) + peer) * nchannels + chans
    span = 3 * (n + 1) * nchannels
    blocks, block = np.unique(rank * span + code, return_inverse=True)
    block_rank = blocks // span
    first_block = np.searchsorted(block_rank, np.arange(n))
    block_id = np.arange(len(blocks)) - first_block[block_rank]
    order = np.lexsort((key, block))
    first_step = np.searchsorted(block[order], np.arange(len(blocks) + 1))
    slot = np.empty(len(order), dtype=np.int64)
    slot[order] = np.arange(len(order)) - first_step[block[order]]
    waits = np.flatnonzero(after >= 0)  # sends that wait for a receive (never their block)
    target = nt + after[waits]
    depid = np.full(len(order), -1, dtype=np.int64)
    deps = np.full(len(order), -1, dtype=np.int64)
    depid[waits], deps[waits] = block_id[block[target]], slot[target]
    hasdep = np.zeros(len(order), dtype=np.int64)
    hasdep[target] = 1
    why = overflow(n, limits, block_rank, rank, np.diff(first_step), block_id[block[target]])
    if why:
        return why
    ops = np.concatenate([np.zeros(nt), np.ones(nt), np.full(len(c_rank), 2)]).astype(np.int64)
    steps = np.stack([ops, np.concatenate([sbuf, sbuf, c_buf]),
                      np.concatenate([soff, soff, c_off]),
                      np.concatenate([np.full(2 * nt, 2), np.ones(len(c_rank))]).astype(np.int64),
                      np.concatenate([doff, doff, c_out]),
                      np.concatenate([cnt, cnt, np.full(len(c_rank), k)]),
                      depid, deps, hasdep], axis=1)[order]
    kinds, peers = (blocks % span) // nchannels // (n + 1), (blocks % span) // nchannels % (n + 1)
    table = np.stack([block_rank, np.where(kinds == 1, peers, -1), np.where(kinds == 0, peers, -1),
                      blocks % nchannels, first_step[:-1]], axis=1)
    started = np.argsort(position)
    moves = np.stack([chunk, cnt, u, w, np.where(after >= 0, position[after], -1)],
                     axis=1)[started]
    return GridPlan(nchannels, n * k, finish, np.array(scratch, dtype=np.int64), table, steps,
                    moves)


def grid_elements(dims: tuple[int, ...], wrap: bool, k: int,
                  limits: RuntimeLimits = MSCCL) -> tuple[int, int]:
    """(the most XML elements one rank reads for the grid plan, that rank) by arithmetic,
    without building it: the ``<algo>``, every ``<gpu>``, and the rank's steps and thread
    blocks. In the phase of dimension ``p`` every rank holds ``d_0 ⋯ d_(p−1)`` bundles, and
    the groups of a bundle depend only on its holder's coordinate along ``p``: each group
    hop is a send at one end and a receive at the other, each receive on a link takes a
    thread block per :data:`PER_CHANNEL`, and every chunk delivered is one copy (and
    a thread block of its own for the rank's chunk to itself).

    >>> grid_elements((16, 16), False, 1)[0] <= MSCCL.max_elements
    True
    """
    m, n = len(dims), math.prod(dims)
    steps = np.full(n, n, dtype=np.int64)  # a copy per source, the rank's own one too
    blocks = np.ones(n, dtype=np.int64)    # the block of the rank's copy to itself
    ranks = np.arange(n)
    for p in range(m):
        d, bundles = dims[p], math.prod(dims[:p])
        per_group = _per_group(math.prod(dims[p + 1:]) * k, p == m - 1, limits)
        ends = np.zeros(d, dtype=np.int64)           # group hops sent or received at x
        load = np.zeros((d, 2), dtype=np.int64)      # groups on the link from x, + and −
        for c in range(d):
            for step, elements in _groups(c, d, wrap, per_group):
                for h in range(1, elements[-1][1] + 1):
                    x = (c + step * (h - 1)) % d
                    ends[x] += 1
                    ends[(x + step) % d] += 1
                    load[x, int(step < 0)] += 1
        x = (ranks // math.prod(dims[p + 1:])) % d
        steps += bundles * ends[x]
        tbs = -(-bundles * load // PER_CHANNEL)  # per link, sending or receiving
        blocks += tbs[x, 0] + tbs[x, 1] + tbs[(x - 1) % d, 0] + tbs[(x + 1) % d, 1]
    elements = 1 + n + steps + blocks
    v = int(np.argmax(elements))
    return int(elements[v]), v


def grid_hops(dims: tuple[int, ...], wrap: bool) -> int:
    """Links crossed by one chunk per ordered pair of ranks on shortest paths, by
    arithmetic: a coordinate pair of dimension ``p`` recurs ``(n / d_p)²`` times.

    >>> grid_hops((2, 2), False), grid_hops((16, 16), True)
    (16, 524288)
    """
    n = math.prod(dims)
    line = [(d ** 3 - d) // 3 if not wrap else d * (d * d // 4) for d in dims]
    return sum((n // d) ** 2 * s for d, s in zip(dims, line, strict=True))


def grid_takes(topology: Topology, collective: Collective) -> bool:
    """Does :func:`solve_grid_alltoall` take this AlltoAll (every GPU in order, out of
    place, on a mesh or torus, at least :data:`GRID_FROM_HOPS` chunk-hops)?"""
    shape = grid_shape(topology)
    return (shape is not None and not collective.inplace
            and collective.ranks == tuple(range(topology.ngpus))
            and collective.chunks_per_rank * grid_hops(*shape) >= GRID_FROM_HOPS)


def _alltoall_chunks(problem: Problem, n: int) -> int | None:
    """Chunks per pair if the demands are the AlltoAll of every GPU in rank order (chunk
    ``(s·n + d)·k + j`` from ``g{s}`` to ``g{d}``), else None."""
    demands = problem.demands
    k, extra = divmod(len(demands), n * n)
    if extra or not k:
        return None
    for dm in demands:
        (s,), (d,) = dm.sources, dm.destinations
        if (dm.chunk // k) != int(s[1:]) * n + int(d[1:]):
            return None
    return k


def solve_grid_alltoall(problem: Problem, min_hops: int = GRID_FROM_HOPS
                        ) -> tuple[Moves, tuple[str, ...]] | None:
    """(moves, notes) of the grid AlltoAll where the topology is a generated mesh or torus,
    the demands its AlltoAll over every GPU, its links alike and the file fits the
    runtime, and the chunks cross at least ``min_hops`` links (shortest paths); else None.

    The moves are the file's transfers chunk by chunk: each group, in the plan's order on
    its link, starts once the link is free and the group it was received in has arrived."""
    topology = problem.topology
    shape = grid_shape(topology)
    if shape is None or problem.relay_limit or any(
            len(dm.sources) != 1 or len(dm.destinations) != 1 for dm in problem.demands):
        return None  # relays keep every group they receive: GPUs need unlimited buffers
    dims, wrap = shape
    n = math.prod(dims)
    k = _alltoall_chunks(problem, n)
    timings = problem.timings
    if k is None or k * grid_hops(dims, wrap) < min_hops or len(
            {(t.occupancy, t.capacity, t.delay) for t in timings.values()}) != 1:
        return None
    plan = grid_plan(dims, wrap, k, grid_alpha(topology, problem.chunk_bytes))
    if isinstance(plan, str):
        return None
    moves = grid_moves(topology, n, plan, next(iter(timings.values())), PLANNING)
    cnt = plan.moves[:, 1]
    notes = (f"grid AlltoAll: dimension by dimension, slowest first, {len(cnt):,} groups of "
             f"up to {int(cnt.max())} chunks relayed in one step each, on {plan.nchannels} "
             "channel(s)",)
    return moves, notes
