"""AllGather, ReduceScatter and AllReduce on a mesh or torus, line by line, whole groups
moved in one step.

**AllGather**, the fastest dimension (rank stride 1) first: along it every rank
broadcasts its chunks to the others of its line (both ways, a ring's antipode one way
from even holders, the other from odd ones), each hop a receive and a send on. After
the phases of dimensions ``p+1 …`` a rank holds the chunks of the ranks that share its
coordinates before them, a *group* contiguous in the buffer (rank-major), and
broadcasts that group along dimension ``p`` the same way: one step of ``cnt = group``
per hop. **ReduceScatter** is its reverse, the slowest dimension first: the group of
each rank of a line flows to it from both ends, each rank on the way adding its partial
sums (``rrc`` into its input buffer, then a send on), so after dimension ``p`` a rank
holds the line's sums of its own group. **AllReduce** is the ReduceScatter then the
AllGather of the sums, in the input buffer in place (out of place the sums are copied to
the output and gathered there). A rank's steps are a few per neighbour and phase (mesh
32×32 AllGather: at most 128 sends and receives a rank, where one step per chunk and hop takes
about 2,000).

**Against the bound.** The dimensions take turns, so only the links of one dimension
carry data at a time. A rank takes in ``n − 1`` chunks; the bound lets it use all its
in-links at once (``2D`` on a torus of ``D`` dimensions, ``D`` at a mesh's corner). Here a
phase of groups of ``E`` chunks along a line of ``d`` keeps its busiest link busy for
``(d − 1)·E`` chunk times on a mesh (the end of a line takes everything through one
link) and ``⌈(d − 1)/2⌉·E`` on a ring (both ways round), and the phases add up to
``n − 1`` chunks' worth of groups, ``E`` growing by ``d`` each phase. At large sizes a
file thus replays at about ``D×`` the bound on a mesh and ``D·⌈(d − 1)/2⌉ / ((d − 1)/2)``
on a torus (``D`` for odd ``d``, ``2 · 32/31`` for torus 32×32, whose AllGather
replays at 2.07× at 1 GB); a ReduceScatter is its reverse, the same. Data split in
``D`` parts going through the dimensions in rotated orders would keep every link busy,
but a part whose first dimension is not the fastest gathers groups that are not
contiguous in the buffer: it goes through scratch, and every piece of it is then a copy
of its own (about ``n`` steps a rank, a million at 1024 GPUs, as many as a file of one
step per chunk and hop has). This
is the first file of a large grid; the anytime search improves on it where it has time.

Deadlock-free by construction: every thread block takes its steps in the order one list
schedule starts the group transfers (:func:`~te_ccl.backends.scale.grid.list_order`),
and every step waits only for steps that started before it: a group's first send for
what the group holds at its rank (the receives of the earlier gather phases, the sums of
the reduce phases), a reduction for the sums its rank made in earlier phases (which
that transfer's start waits for too) and for the other end's sum into the same group,
by a ``nop`` per thread block beyond the first. The schedule
(:func:`grid_lines_schedule`) has the same transfers chunk by chunk
(:func:`~te_ccl.backends.scale.grid.grid_moves`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np

from te_ccl.backends.scale.grid import (
    PER_CHANNEL,
    GridPlan,
    channels,
    coords,
    grid_alpha,
    grid_moves,
    grid_shape,
    neighbour,
    overflow,
)
from te_ccl.backends.scale.moves import Moves
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import check
from te_ccl.model.epochs import link_timing
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.schedule import LazyTransfers, Schedule, SolveInfo, Transfer, transfers_of
from te_ccl.topology.model import Topology

__all__ = ["METHODS", "BACKEND", "GRID_FROM_DELIVERIES", "lines_plan", "lines_elements",
           "grid_lines_takes", "grid_lines_schedule"]

_AG, _RS, _AR = CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE
METHODS = {_AG: "grid-allgather", _RS: "grid-reducescatter", _AR: "grid-allreduce"}
BACKEND = "grid"  # the schedule's info.backend
PLANNING = "planning the grid collective"  # what a deadline reached interrupted
GRID_FROM_DELIVERIES = 500_000  # chunk deliveries (an AllReduce's twice) from which the
#                                 first file is this one: a file of one step per chunk and
#                                 hop then takes the lowering and the verifier longer than a
#                                 first file may (torus 8×8×8 AllReduce: 523,264; its
#                                 AllGather's 261,632 stay a per-chunk file near the bound).
#                                 Not lower: a 256-GPU AllReduce's grid file (130,560) is
#                                 over 2× the bound, and the cheap candidates the compile
#                                 then builds and lowers to beat it take its whole limit
_S, _R, _CPY, _NOP, _RRC = 0, 1, 2, 3, 4  # step codes (grid.OPS)
_I, _O = 0, 1  # buffer codes (grid.BUFFERS)
_GIDS = 1 << 32  # chains fewer than this: a priority is (phase, hops) · _GIDS + chain


@dataclass(frozen=True)
class _Layout:
    """Where a kind's phases keep their data: the reduce phases in ``i``; the gather
    phases in ``gather``; the one copy of a rank's own chunks (``copy``: source buffer,
    its offset is the rank's · k if ``src_at_rank``, destination buffer, ditto), made
    before phase ``copy_at`` and after what that phase's groups need."""

    phases: tuple[tuple[int, bool], ...]  # (dimension, reduces?) in order
    gather: int
    copy: tuple[int, bool, int, bool] | None
    copy_at: int


def _layout(kind: CollectiveKind, m: int, inplace: bool) -> _Layout:
    gather = tuple((p, False) for p in reversed(range(m)))
    reduce = tuple((p, True) for p in range(m))
    if kind is _AG:
        return _Layout(gather, _O, None if inplace else (_I, False, _O, True), 0)
    if kind is _RS:
        return _Layout(reduce, _O, None if inplace else (_I, True, _O, False), m)
    return _Layout(reduce + gather, _I if inplace else _O,
                   None if inplace else (_I, True, _O, True), m)


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


@dataclass(frozen=True)
class _Line:
    """What a rank at each coordinate ``c`` of a line does in one phase (lists by ``c``):
    group hops it sends and receives gathering (reversed when reducing), groups it starts
    gathering (its own) and reducing (those whose far end it is), the sides its own
    group's sums come from, and the group hops on each link (from ``c``, + and −) of a
    gather phase and of a reduce phase."""

    sends: list[int]
    receives: list[int]
    gather_starts: list[int]
    reduce_starts: list[int]
    root_sides: list[int]
    gather_load: np.ndarray
    reduce_load: np.ndarray


def _line(d: int, wrap: bool) -> _Line:
    sends, receives, gs, rs, roots = [0] * d, [0] * d, [0] * d, [0] * d, [0] * d
    gather, reduce = np.zeros((d, 2), dtype=np.int64), np.zeros((d, 2), dtype=np.int64)
    for c in range(d):
        for step, far in _reach(c, d, wrap):
            gs[c] += 1
            rs[(c + step * far) % d] += 1
            roots[c] += 1
            for h in range(far):
                x = (c + step * h) % d
                sends[x] += 1
                receives[(x + step) % d] += 1
                gather[x, int(step < 0)] += 1
                reduce[(x + step) % d, int(step > 0)] += 1
    return _Line(sends, receives, gs, rs, roots, gather, reduce)


def lines_elements(kind: CollectiveKind, dims: tuple[int, ...], wrap: bool, k: int,
                   inplace: bool) -> tuple[int, int]:
    """(the most XML elements one rank reads for :func:`lines_plan`, that rank) by
    arithmetic, without building it: the ``<algo>``, every ``<gpu>``, and the rank's
    steps and thread blocks. In each phase the group hops a rank sends and receives
    depend only on its coordinate along the phase's dimension; each link takes a thread
    block a side per :data:`PER_CHANNEL` group hops of all phases; a step that waits for
    steps of several thread blocks has a ``nop`` for each beyond the first. Exact for an
    AllGather where every link takes one channel (every grid this is the first file of);
    otherwise at least the plan's: a reduction's waits are counted for every step, where
    the plan leaves out those an earlier step of its thread block waited for already.

    >>> lines_elements(CollectiveKind.ALLGATHER, (32, 32), True, 1, False)[0] <= MSCCL.max_elements
    True
    """
    m, n = len(dims), math.prod(dims)
    lay = _layout(kind, m, inplace)
    lines = [_line(d, wrap) for d in dims]
    ranks = np.arange(n)
    at = [(ranks // math.prod(dims[p + 1:])) % dims[p] for p in range(m)]
    kinds = {p: {r for q, r in lay.phases if q == p} for p in range(m)}
    chans, into = {}, {}
    for p, line in enumerate(lines):
        load = line.gather_load * (False in kinds[p]) + line.reduce_load * (True in kinds[p])
        chans[p] = -(-load // PER_CHANNEL)
        c, d = at[p], dims[p]
        into[p] = chans[p][(c - 1) % d, 0] + chans[p][(c + 1) % d, 1]
    own = lay.copy is not None
    steps = np.full(n, int(own), dtype=np.int64)
    blocks = np.full(n, int(own), dtype=np.int64)
    for p in range(m):
        blocks += into[p] + chans[p][at[p], 0] + chans[p][at[p], 1]
    gathered = np.zeros(n, dtype=np.int64)  # receiving thread blocks of the gathers so far
    sums: dict[int, np.ndarray] = {}        # by dimension: sides of the sums so far
    done: set[int] = set()                  # dimensions gathered

    def waited() -> np.ndarray:  # their blocks: a sum on a link gathered from is in one
        return gathered + sum((v for p, v in sums.items() if p not in done), start=0 * ranks)

    for t, (p, reduces) in enumerate(lay.phases):
        if t == lay.copy_at and own:
            steps += np.maximum(waited() - 1, 0)
        line, c = lines[p], at[p]
        steps += np.array(line.sends)[c] + np.array(line.receives)[c]
        if reduces:
            before = sum(sums.values(), start=0 * ranks)
            steps += (np.array(line.reduce_starts)[c] + np.array(line.sends)[c]) * \
                np.maximum(before - 1, 0) + (np.array(line.root_sides)[c] == 2) * (before > 0)
            sums[p] = np.array(line.root_sides)[c]
        else:
            copy = int(own and t >= lay.copy_at and not (kind is _AG and t == 0))
            steps += np.array(line.gather_starts)[c] * np.maximum(waited() + copy - 1, 0)
            gathered += into[p]
            done.add(p)
    if lay.copy_at == len(lay.phases) and own:
        steps += np.maximum(waited() - 1, 0)
    elements = 1 + n + steps + blocks
    v = int(np.argmax(elements))
    return int(elements[v]), v


def lines_plan(kind: CollectiveKind, dims: tuple[int, ...], wrap: bool, k: int,
               inplace: bool, alpha: float = 0.0, limits: RuntimeLimits = MSCCL
               ) -> GridPlan | str:
    """The file of ``kind`` on the grid with ``k`` chunks per rank, or why none fits
    ``limits`` (a group over a step's ``max_count − 1`` chunks, more elements or thread
    blocks a rank than the runtime holds), the arithmetic checked before building."""
    return _plan(kind, tuple(dims), wrap, k, inplace, alpha, limits)


@lru_cache(maxsize=2)
def _plan(kind: CollectiveKind, dims: tuple[int, ...], wrap: bool, k: int, inplace: bool,
          alpha: float, limits: RuntimeLimits) -> GridPlan | str:
    """:func:`lines_plan`, its arguments as one key (built once for the schedule and its
    lowering)."""
    m, n = len(dims), math.prod(dims)
    stride = [math.prod(dims[p + 1:]) for p in range(m)]
    if stride[0] * k > limits.max_count - 1:
        return (f"a group of {stride[0] * k} chunks (the ranks behind the slowest dimension "
                f"× {k}) is more than a step carries ({limits.max_count - 1})")
    need, v = lines_elements(kind, dims, wrap, k, inplace)
    if need > limits.max_elements:
        return (f"its rank {v} reads {need:,} XML elements, more than the "
                f"{limits.max_elements} the runtime's reader holds")
    return _assemble(n, k, _Chains(kind, dims, wrap, k, inplace), limits, alpha)


class _Chains:
    """The group transfers of every phase, chain by chain (a group from its holder to
    the far end of its line, or reversed, to it), as columns, and what each waits for:
    ``waits`` (transfer, transfer whose arrival it needs to start, in the list
    schedule), ``send_waits`` (of those, the sender's receives the file's send waits
    for: a relay's reduction waits for the rest) and ``recv_waits`` (the sums a
    reduction into an overlapping group must follow); ``copy_waits`` per rank."""

    def __init__(self, kind: CollectiveKind, dims: tuple[int, ...], wrap: bool, k: int,
                 inplace: bool) -> None:
        self.lay = lay = _layout(kind, len(dims), inplace)
        n = math.prod(dims)
        # prio, u, w, cnt, sbuf, soff, dbuf, first, reduces, root (receiver's own group)
        self.cols: tuple[list[int], ...] = tuple([] for _ in range(10))
        self.waits: list[tuple[int, int]] = []
        self.send_waits: list[tuple[int, int]] = []  # of those, on the sender's receives
        self.recv_waits: list[tuple[int, int]] = []
        self.copy_waits: list[list[int]] = [[] for _ in range(n)]
        self.copy_before: list[bool] = []  # a group start that waits for its rank's copy
        got: list[list[int]] = [[] for _ in range(n)]     # receives of gather phases
        sums: list[list[int]] = [[] for _ in range(n)]    # own-group receives of reduce phases
        chain = 0
        for t, (p, reduces) in enumerate(lay.phases):
            check(PLANNING)
            if t == lay.copy_at and lay.copy is not None:
                self.copy_waits = [g + s for g, s in zip(got, sums, strict=True)]
            d, e = dims[p], math.prod(dims[p + 1:])
            new_got: list[list[int]] = [[] for _ in range(n)]
            new_sums: list[list[int]] = [[] for _ in range(n)]
            for x in range(n):
                first = (x // e) * e * k
                for step, far in _reach(coords(x, dims)[p], d, wrap):
                    chain += 1
                    line = [x]
                    for _ in range(far):
                        line.append(neighbour(line[-1], p, step, dims, wrap))
                    if reduces:
                        line.reverse()
                    before = -1
                    for j in range(far):
                        u, w = line[j], line[j + 1]
                        row = len(self.cols[0])
                        start = before < 0
                        if reduces:
                            src = (_I, first)
                        elif start and t == 0 and kind is _AG and lay.copy is not None:
                            src = (_I, 0)
                        else:
                            src = (lay.gather, first)
                        dbuf = _I if reduces else lay.gather
                        root = reduces and j == far - 1
                        for col, val in zip(self.cols, ((t * 1024 + j - far) * _GIDS + chain,
                                                        u, w, e * k, *src, dbuf, first,
                                                        int(reduces), int(root)), strict=True):
                            col.append(val)
                        if reduces:  # what the reduction at w follows starts it too
                            mine = sums[u] if start else [before]
                            self.waits.extend((row, a) for a in mine + sums[w])
                            self.recv_waits.extend((row, a) for a in sums[w])
                        else:
                            mine = got[u] + sums[u] if start else [before]
                            self.waits.extend((row, a) for a in mine)
                        self.send_waits.extend((row, a) for a in mine)
                        self.copy_before.append(not reduces and start and t >= lay.copy_at
                                                and lay.copy is not None and src[0] != _I)
                        before = row
                        (new_sums if root else new_got)[w].append(row)
            for v in range(n):
                got[v].extend(new_got[v] if not reduces else ())
                sums[v].extend(new_sums[v])
        if lay.copy_at == len(lay.phases) and lay.copy is not None:
            self.copy_waits = [g + s for g, s in zip(got, sums, strict=True)]


def _assemble(n: int, k: int, chains: _Chains, limits: RuntimeLimits, alpha: float
              ) -> GridPlan | str:
    """Channels per link (as few as hold :data:`PER_CHANNEL` transfers each, dealt in
    start order round-robin), thread blocks (receiving ones first, then sending ones,
    then the copy), steps in start order with their waits (each on the last step it
    needs in each other thread block, the first by the step's own dependency and the
    others by a ``nop`` before it), or why the runtime cannot hold it."""
    check(PLANNING)
    lay = chains.lay
    prio, u, w, cnt, sbuf, soff, dbuf, first, reduces, root = (
        np.array(c, dtype=np.int64) for c in chains.cols)
    waits = np.array(chains.waits, dtype=np.int64).reshape(-1, 2)
    link = u * n + w
    dealt = channels(chains.cols[0], link, chains.cols[3], waits, alpha, limits)
    if isinstance(dealt, str):
        return dealt
    position, finish, chan, nchannels = dealt
    nt = len(u)
    tbs: list[dict[tuple[int, int, int], int]] = [{} for _ in range(n)]
    for kind, ranks, peers in ((0, w, u), (1, u, w)):
        for key in sorted(set(zip(ranks.tolist(), peers.tolist(), chan.tolist(), strict=True))):
            tbs[key[0]].setdefault((kind, key[1], key[2]), len(tbs[key[0]]))
    if lay.copy is not None:
        for v in range(n):
            tbs[v][(2, -1, 0)] = len(tbs[v])
    rows: list[list[list[list[int]]]] = [[[] for _ in tb] for tb in tbs]
    covered: list[list[dict[int, int]]] = [[{} for _ in tb] for tb in tbs]  # waited so far
    at = [(0, 0)] * nt  # (block, slot) of each receive
    send_needs: list[list[int]] = [[] for _ in range(nt)]
    for i, a in chains.send_waits:
        send_needs[i].append(a)
    recv_needs: list[list[int]] = [[] for _ in range(nt)]
    for i, a in chains.recv_waits:
        recv_needs[i].append(a)
    roots: dict[tuple[int, int, int], int] = {}  # (rank, group) -> the first sum into it
    copied: list[tuple[int, int] | None] = [None] * n
    ul, wl, cl, cntl, fl = u.tolist(), w.tolist(), chan.tolist(), cnt.tolist(), first.tolist()

    def place(v: int, block: int, needs: list[int], extra: list[tuple[int, int]],
              step: list[int]) -> tuple[int, int]:
        """Add ``step`` to ``block`` of ``v`` after a nop per waited block beyond one
        (none for a step an earlier one of its block waited for)."""
        targets: dict[int, int] = {}
        seen = covered[v][block]
        for b, s in [at[a] for a in needs] + extra:
            if b != block and s > seen.get(b, -1):
                targets[b] = max(targets.get(b, -1), s)
        seen.update(targets)  # a later step of the block is past these already
        mine = rows[v][block]
        waiting = sorted(targets.items())
        for b, s in waiting[:-1]:
            mine.append([_NOP, -1, -1, -1, -1, 0, b, s, 0])
        step[6:8] = waiting[-1] if waiting else (-1, -1)
        mine.append(step)
        for b, s in waiting:
            rows[v][b][s][8] = 1
        return block, len(mine) - 1

    def copy(v: int) -> tuple[int, int]:
        """The rank's copy (placed at its first use: what it waits for has started)."""
        if copied[v] is None:
            sb, s_at, db, d_at = lay.copy
            copied[v] = place(v, tbs[v][(2, -1, 0)], chains.copy_waits[v], [],
                              [_CPY, sb, v * k if s_at else 0, db, v * k if d_at else 0, k,
                               -1, -1, 0])
        return copied[v]

    for j, i in enumerate(np.argsort(position).tolist()):
        if j % 65536 == 0:  # a 1024-GPU AllReduce places a quarter million steps
            check(PLANNING)
        v, x = ul[i], wl[i]
        extra = [copy(v)] if chains.copy_before[i] else []
        place(v, tbs[v][(1, x, cl[i])], send_needs[i], extra,
              [_S, int(sbuf[i]), int(soff[i]), int(dbuf[i]), fl[i], cntl[i], -1, -1, 0])
        if reduces[i]:
            group = (x, fl[i], cntl[i])
            same = [roots[group]] if root[i] and group in roots else []
            at[i] = place(x, tbs[x][(0, v, cl[i])], recv_needs[i], [at[a] for a in same],
                          [_RRC, _I, fl[i], _I, fl[i], cntl[i], -1, -1, 0])
            if root[i]:
                roots.setdefault(group, i)
        else:
            at[i] = place(x, tbs[x][(0, v, cl[i])], [], [],
                          [_R, int(dbuf[i]), fl[i], int(dbuf[i]), fl[i], cntl[i], -1, -1, 0])
    if lay.copy is not None:
        for v in range(n):
            copy(v)
    return _pack(n, k, nchannels, finish, tbs, rows, position, (first, cnt, u, w, reduces),
                 waits, limits)


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
    first, cnt, u, w, reduces = moved
    moves = np.stack([first, cnt, u, w, np.full(len(u), -1)], axis=1)[started]
    return GridPlan(nchannels, n * k, finish, np.zeros(n, dtype=np.int64),
                    np.array(table, dtype=np.int64), np.array(flat, dtype=np.int64), moves,
                    position[waits] if len(waits) else waits, reduces[started].astype(bool))


def grid_lines_takes(topology: Topology, collective: Collective) -> bool:
    """Is the grid method the first file of this collective: an AllGather,
    ReduceScatter or AllReduce of every GPU in rank order on a generated mesh or torus
    with links alike, of at least :data:`GRID_FROM_DELIVERIES` chunk deliveries, whose
    file fits the runtime (by arithmetic, :func:`lines_elements`)?"""
    shape = grid_shape(topology)
    if shape is None or collective.kind not in METHODS or \
            collective.ranks != tuple(range(topology.ngpus)) or \
            len({(x.bandwidth_Bps, x.latency_s) for x in topology.links}) != 1:
        return False
    dims, wrap = shape
    n, k = math.prod(dims), collective.chunks_per_rank
    phases = 2 if collective.kind is _AR else 1
    if n * (n - 1) * k * phases < GRID_FROM_DELIVERIES or \
            (n // dims[0]) * k > MSCCL.max_count - 1:
        return False
    return lines_elements(collective.kind, dims, wrap, k, collective.inplace)[0] \
        <= MSCCL.max_elements


def grid_lines_schedule(topology: Topology, collective: Collective) -> Schedule | None:
    """The grid method's file of ``collective`` as a schedule (the plan's transfers chunk
    by chunk, the reduce phases' as reductions; epochs of one chunk's time on a link),
    None where it does not take it or its plan does not fit the runtime."""
    if not grid_lines_takes(topology, collective):
        return None
    dims, wrap = grid_shape(topology)
    n, k = math.prod(dims), collective.chunks_per_rank
    plan = lines_plan(collective.kind, dims, wrap, k, collective.inplace,
                      grid_alpha(topology, collective.chunk_bytes))
    if isinstance(plan, str):
        return None
    link = topology.links[0]
    tau = collective.chunk_bytes / link.bandwidth_Bps
    moves = grid_moves(topology, n, plan, link_timing(link, collective.chunk_bytes, tau),
                       PLANNING)
    cnt = plan.moves[:, 1]
    reduced = np.repeat(plan.reduced, cnt)
    method = METHODS[collective.kind]
    notes = (f"{method}: line by line, {len(cnt):,} groups of up to {int(cnt.max())} chunks "
             f"moved in one step each, on {plan.nchannels} channel(s)",)
    # not the scale backend's schedule of this chunking: the search still solves that one
    info = SolveInfo(backend=BACKEND, status=f"scale/{method}: feasible (not proven optimal)",
                     notes=notes, subchunks=1)
    # the file is lowered from the plan: the transfers wait for a reader
    transfers = LazyTransfers(len(moves), moves.finish, partial(_transfers, moves, reduced),
                              moves.arrivals)
    return Schedule(topology, collective, tau, transfers, info)


def _transfers(moves: Moves, reduced: np.ndarray) -> list[Transfer]:
    """The Transfer objects of ``moves``: the reductions (``reduced``), then the copies."""
    transfers = []
    for op, rows in (("reduce", reduced), ("copy", ~reduced)):
        part = Moves(moves.names, *(col[rows] for col in (moves.chunk, moves.src, moves.dst,
                                                          moves.start, moves.arrive)))
        names = np.array(part.names, dtype=object)
        transfers += transfers_of(zip(part.chunk.tolist(), names[part.src].tolist(),
                                      names[part.dst].tolist(), part.start.tolist(),
                                      part.arrive.tolist(), strict=True), op)
    return transfers
