"""AllGather on a mesh or torus dimension by dimension, whole groups forwarded in one step.

The fastest dimension (rank stride 1) first: along it every rank broadcasts its chunks
to the others of its line (both ways, a ring's antipode one way from even holders, the
other from odd ones), each hop a receive into the output buffer and a send on. After
the phases of dimensions ``p+1 …`` a rank holds the chunks of the ranks that share its
coordinates before them, a *group* contiguous in the output buffer (rank-major), and
broadcasts that group along dimension ``p`` the same way: one step of ``cnt = group``
per hop. A rank's steps are a few per neighbour and phase (mesh 32×32: 126 sends and
receives a rank, where one step per chunk and hop takes about 2,000).

The dimensions take turns, so only the links of one dimension carry data at a time:
a rank takes in its ``n − 1`` groups' worth over the 2 in-links of one dimension,
where the bound lets it use all ``2D`` (a torus; the 2 of a mesh's corner). At large
sizes the file replays at about ``D×`` the bound on a torus of ``D`` dimensions
and ``2×`` on a 2D mesh (the corner takes everything through one link per phase). Data
split in ``D`` parts going through the dimensions in rotated orders would keep every
link busy, but a part whose first dimension is not the fastest gathers groups that are
not contiguous in the output: its receives go through scratch, and then every piece is
a copy of its own (about ``n`` per rank), which the verifier and the replay take in
one by one as they take a step of one chunk, so that file costs as much to check as
one step per chunk and hop. This one is the first file of a large grid; the anytime
search improves on it where it has time.

Deadlock-free by construction: every thread block takes its steps in the order one list
schedule starts the group transfers (:func:`~te_ccl.backends.scale.grid.list_order`),
and a step waits only for receives that started before it (a group's first send for
every receive of the earlier phases at its rank, by a ``nop`` per receiving thread
block beyond the first). The schedule (:func:`grid_allgather_schedule`) has the same
transfers chunk by chunk (:func:`~te_ccl.backends.scale.grid.grid_moves`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np

from te_ccl.backends.scale.grid import (
    PER_CHANNEL,
    GridPlan,
    coords,
    grid_alpha,
    grid_moves,
    grid_shape,
    list_order,
    neighbour,
    overflow,
)
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import check
from te_ccl.model.epochs import link_timing
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.schedule import Schedule, SolveInfo
from te_ccl.topology.model import Topology

__all__ = ["METHOD", "GRID_FROM_DELIVERIES", "allgather_plan", "allgather_elements",
           "grid_allgather_takes", "grid_allgather_schedule"]

METHOD = "grid-allgather"
PLANNING = "planning the grid AllGather"  # what a deadline reached interrupted
GRID_FROM_DELIVERIES = 200_000  # chunk deliveries from which the first file is this one:
#                                 one step per chunk and hop takes the lowering and the
#                                 verifier longer than a first file may (torus 8×8×8: 261,632)
_S, _R, _CPY, _NOP = 0, 1, 2, 3  # step codes (grid.OPS)
_I, _O = 0, 1  # buffer codes (grid.BUFFERS)


def _reach(c: int, d: int, wrap: bool) -> tuple[tuple[int, int], ...]:
    """(direction, hops) a holder at coordinate ``c`` of a line or ring of ``d`` sends its
    group: every other rank once, the shorter way round a ring (its antipode the way the
    holder's parity says)."""
    if wrap:
        half = (d - 1) // 2
        ahead = {1: half, -1: half}
        if d % 2 == 0:
            ahead[1 if c % 2 == 0 else -1] += 1
    else:
        ahead = {1: d - 1 - c, -1: c}
    return tuple((step, h) for step, h in ahead.items() if h)


def allgather_elements(dims: tuple[int, ...], wrap: bool, k: int, inplace: bool
                       ) -> tuple[int, int]:
    """(the most XML elements one rank reads for the grid AllGather, that rank) by
    arithmetic, without building it: the ``<algo>``, every ``<gpu>``, and the rank's
    steps and thread blocks. Along dimension ``p`` the group hops a rank sends or
    receives depend only on its coordinate there; each link takes a thread block a side
    per :data:`PER_CHANNEL` group hops; a group the rank starts after the first phase
    waits for every receiving thread block of the earlier phases (and out of place for
    its copy), one of them by its own step and each other by a ``nop``.

    >>> allgather_elements((32, 32), True, 1, False)[0] <= MSCCL.max_elements
    True
    """
    m, n = len(dims), math.prod(dims)
    own = 0 if inplace else 1
    steps = np.full(n, own, dtype=np.int64)
    blocks = np.full(n, own, dtype=np.int64)
    receivers = np.zeros(n, dtype=np.int64)  # receiving thread blocks of the phases so far
    ranks = np.arange(n)
    for p in reversed(range(m)):
        d = dims[p]
        ends = np.zeros(d, dtype=np.int64)           # group hops sent or received at x
        load = np.zeros((d, 2), dtype=np.int64)      # group hops on the link from x, + and −
        starts = np.zeros(d, dtype=np.int64)         # groups a holder at x sends
        for c in range(d):
            for step, far in _reach(c, d, wrap):
                starts[c] += 1
                for h in range(far):
                    x = (c + step * h) % d
                    ends[x] += 1
                    ends[(x + step) % d] += 1
                    load[x, int(step < 0)] += 1
        x = (ranks // math.prod(dims[p + 1:])) % d
        chans = -(-load // PER_CHANNEL)
        got = chans[(x - 1) % d, 0] * (wrap | (x > 0)) + chans[(x + 1) % d, 1] * (wrap | (x < d - 1))
        if p < m - 1:
            steps += starts[x] * np.maximum(receivers + own - 1, 0)
        steps += ends[x]
        blocks += got + chans[x, 0] + chans[x, 1]
        receivers += got
    elements = 1 + n + steps + blocks
    v = int(np.argmax(elements))
    return int(elements[v]), v


def allgather_plan(dims: tuple[int, ...], wrap: bool, k: int, inplace: bool,
                   alpha: float = 0.0, limits: RuntimeLimits = MSCCL) -> GridPlan | str:
    """The file of the grid AllGather with ``k`` chunks per rank, or why none fits
    ``limits`` (a group over a step's ``max_count − 1`` chunks, more elements or thread
    blocks a rank than the runtime holds), the arithmetic checked before building."""
    return _plan(tuple(dims), wrap, k, inplace, alpha, limits)


@lru_cache(maxsize=2)
def _plan(dims: tuple[int, ...], wrap: bool, k: int, inplace: bool, alpha: float,
          limits: RuntimeLimits) -> GridPlan | str:
    """:func:`allgather_plan`, its arguments as one key (built once for the schedule and
    its lowering)."""
    m, n = len(dims), math.prod(dims)
    stride = [math.prod(dims[p + 1:]) for p in range(m)]
    if stride[0] * k > limits.max_count - 1:
        return (f"a group of {stride[0] * k} chunks (the ranks behind the slowest dimension "
                f"× {k}) is more than a step carries ({limits.max_count - 1})")
    need, v = allgather_elements(dims, wrap, k, inplace)
    if need > limits.max_elements:
        return (f"its rank {v} reads {need:,} XML elements, more than the "
                f"{limits.max_elements} the runtime's reader holds")
    cols: tuple[list[int], ...] = tuple([] for _ in range(7))  # prio, u, w, cnt, sbuf, soff, first
    waits: list[tuple[int, int]] = []  # (transfer, transfer it waits for)
    received: list[list[int]] = [[] for _ in range(n)]  # by rank, of the phases before
    own = not inplace  # a rank's chunks copied from i to o first; its later groups wait
    for p in reversed(range(m)):
        check(PLANNING)
        d, e = dims[p], stride[p]
        arrived: list[list[int]] = [[] for _ in range(n)]
        for v in range(n):
            c = coords(v, dims)[p]
            first = (v // e) * e * k  # the group's first chunk: its offset in o
            src = (_I, 0) if p == m - 1 and own else (_O, first)
            for step, far in _reach(c, d, wrap):
                before = received[v]
                u, sbuf, soff = v, *src
                for hop in range(far):
                    w = neighbour(u, p, step, dims, wrap)
                    row = len(cols[0])
                    for col, x in zip(cols, (-hop, u, w, e * k, sbuf, soff, first), strict=True):
                        col.append(x)
                    waits.extend((row, a) for a in before)
                    before = [row]
                    arrived[w].append(row)
                    u, sbuf, soff = w, _O, first
        for v in range(n):
            received[v].extend(arrived[v])
    return _assemble(n, k, inplace, cols, np.array(waits, dtype=np.int64).reshape(-1, 2),
                     limits, alpha)


def _assemble(n: int, k: int, inplace: bool, cols: tuple[list[int], ...], waits: np.ndarray,
              limits: RuntimeLimits, alpha: float) -> GridPlan | str:
    """Channels per link (as few as hold :data:`PER_CHANNEL` transfers each, dealt in
    start order round-robin), thread blocks (receiving ones first, then sending ones,
    then the copy of a rank's own chunks), steps in start order, and the waits: a group's
    first send waits for the last receive it needs in each receiving thread block (the
    others by a ``nop`` before it) and out of place for the copy; or why the runtime
    cannot hold it."""
    check(PLANNING)
    prio, u, w, cnt, sbuf, soff, first = (np.array(c, dtype=np.int64) for c in cols)
    link = u * n + w
    position, finish = list_order(cols[0], np.unique(link, return_inverse=True)[1],
                                  cols[3], waits, alpha)
    nt = len(u)
    by_link = np.lexsort((position, link))
    first_of_link = np.searchsorted(link[by_link], link[by_link])
    per_link = np.bincount(link)[link[by_link]]
    chan = np.empty(nt, dtype=np.int64)
    chan[by_link] = (np.arange(nt) - first_of_link) % -(-per_link // PER_CHANNEL)
    nchannels = int(chan.max()) + 1 if nt else 1
    if nchannels > limits.max_channels:
        return (f"a link carries {int(np.bincount(link).max())} groups: more than "
                f"{limits.max_channels} channels of {PER_CHANNEL}")
    # thread blocks by rank: (kind 0 receives | 1 sends | 2 copies, peer, channel)
    tbs: list[dict[tuple[int, int, int], int]] = [{} for _ in range(n)]
    for kind, ranks, peers in ((0, w, u), (1, u, w)):
        for key in sorted(set(zip(ranks.tolist(), peers.tolist(), chan.tolist(), strict=True))):
            tbs[key[0]].setdefault((kind, key[1], key[2]), len(tbs[key[0]]))
    if not inplace:
        for v in range(n):
            tbs[v][(2, -1, 0)] = len(tbs[v])
    # each block's steps: (order key, op, sbuf, soff, dbuf, doff, cnt, transfer or -1)
    rows: list[list[list[int]]] = [[[] for _ in tb] for tb in tbs]
    recv_at: list[tuple[int, int]] = [(0, 0)] * nt  # (block, slot) of each receive
    order = np.argsort(position).tolist()
    ul, wl, cl, cntl = u.tolist(), w.tolist(), chan.tolist(), cnt.tolist()
    first = first.tolist()
    for i in order:
        block = tbs[wl[i]][(0, ul[i], cl[i])]
        recv_at[i] = (block, len(rows[wl[i]][block]))
        rows[wl[i]][block].append([_R, _O, first[i], _O, first[i], cntl[i], -1, -1, 0])
    copy_at = [(tbs[v].get((2, -1, 0), -1), 0) for v in range(n)]
    if not inplace:
        for v in range(n):
            rows[v][copy_at[v][0]].append([_CPY, _I, 0, _O, v * k, k, -1, -1, 0])
    needs: list[list[int]] = [[] for _ in range(nt)]
    for i, a in waits.tolist():
        needs[i].append(a)
    for i in order:
        v = ul[i]
        targets: dict[int, int] = {}
        for a in needs[i]:
            block, slot = recv_at[a]
            targets[block] = max(targets.get(block, -1), slot)
        if not inplace and prio[i] == 0 and sbuf[i] == _O:  # a group of v's, with its copy
            targets[copy_at[v][0]] = 0
        block = tbs[v][(1, wl[i], cl[i])]
        mine = rows[v][block]
        waits_on = sorted(targets.items())
        for b, s in waits_on[:-1]:
            mine.append([_NOP, -1, -1, -1, -1, 0, b, s, 0])
        depid, deps = waits_on[-1] if waits_on else (-1, -1)
        mine.append([_S, int(sbuf[i]), int(soff[i]), _O, first[i], cntl[i], depid, deps, 0])
        for b, s in waits_on:
            rows[v][b][s][8] = 1
    return _pack(n, k, nchannels, finish, tbs, rows, position, (np.array(first), cnt, u, w), waits,
                 limits)


def _pack(n: int, k: int, nchannels: int, finish: float,
          tbs: list[dict[tuple[int, int, int], int]], rows: list[list[list[list[int]]]],
          position: np.ndarray, moved: tuple[np.ndarray, ...], waits: np.ndarray,
          limits: RuntimeLimits) -> GridPlan | str:
    """The blocks and steps as the plan's arrays, or why the runtime cannot hold them."""
    table, flat, block_rank, step_rank, block_steps = [], [], [], [], []
    waited: list[int] = []
    for v in range(n):
        for (kind, peer, chan), b in sorted(tbs[v].items(), key=lambda kv: kv[1]):
            table.append((v, peer if kind == 1 else -1, peer if kind == 0 else -1, chan,
                          len(flat)))
            flat.extend(rows[v][b])
            block_rank.append(v)
            step_rank.extend([v] * len(rows[v][b]))
            block_steps.append(len(rows[v][b]))
        waited.extend(r[6] for b in rows[v] for r in b if r[6] >= 0)
    why = overflow(n, limits, np.array(block_rank), np.array(step_rank),
                   np.array(block_steps), np.array(waited, dtype=np.int64))
    if why:
        return why
    started = np.argsort(position)
    first, cnt, u, w = moved
    moves = np.stack([first, cnt, u, w, np.full(len(u), -1)], axis=1)[started]
    return GridPlan(nchannels, n * k, finish, np.zeros(n, dtype=np.int64),
                    np.array(table, dtype=np.int64), np.array(flat, dtype=np.int64), moves,
                    position[waits] if len(waits) else waits)


def grid_allgather_takes(topology: Topology, collective: Collective) -> bool:
    """Is the grid AllGather the first file of this collective: an AllGather of every GPU
    in rank order on a generated mesh or torus with links alike, of at least
    :data:`GRID_FROM_DELIVERIES` chunk deliveries, whose file fits the runtime (by
    arithmetic, :func:`allgather_elements`)?"""
    shape = grid_shape(topology)
    if shape is None or collective.kind is not CollectiveKind.ALLGATHER or \
            collective.ranks != tuple(range(topology.ngpus)) or \
            len({(x.bandwidth_Bps, x.latency_s) for x in topology.links}) != 1:
        return False
    dims, wrap = shape
    n, k = math.prod(dims), collective.chunks_per_rank
    if n * (n - 1) * k < GRID_FROM_DELIVERIES or (n // dims[0]) * k > MSCCL.max_count - 1:
        return False
    return allgather_elements(dims, wrap, k, collective.inplace)[0] <= MSCCL.max_elements


def grid_allgather_schedule(topology: Topology, collective: Collective) -> Schedule | None:
    """The grid AllGather of ``collective`` as a schedule (the plan's transfers chunk by
    chunk, epochs of one chunk's time on a link), None where it does not take it or its
    plan does not fit the runtime."""
    if not grid_allgather_takes(topology, collective):
        return None
    dims, wrap = grid_shape(topology)
    n, k = math.prod(dims), collective.chunks_per_rank
    plan = allgather_plan(dims, wrap, k, collective.inplace,
                          grid_alpha(topology, collective.chunk_bytes))
    if isinstance(plan, str):
        return None
    link = topology.links[0]
    tau = collective.chunk_bytes / link.bandwidth_Bps
    moves = grid_moves(topology, n, plan, link_timing(link, collective.chunk_bytes, tau),
                       PLANNING)
    cnt = plan.moves[:, 1]
    notes = (f"grid AllGather: dimension by dimension, fastest first, {len(cnt):,} groups "
             f"of up to {int(cnt.max())} chunks relayed in one step each, on "
             f"{plan.nchannels} channel(s)",)
    info = SolveInfo(backend="scale", status=f"scale/{METHOD}: feasible (not proven optimal)",
                     notes=notes, subchunks=1)
    return Schedule(topology, replace(collective), tau, tuple(moves.transfers()), info)
