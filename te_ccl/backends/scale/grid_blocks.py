"""AlltoAll on a 2D mesh or torus in whole rows: the file for grids where the grid
AlltoAll's groups (:mod:`.grid_alltoall`) take more steps than the runtime's reader holds.

Dimension order, slow dimension first. A rank's input holds, for each row ``a'`` of the
grid, the chunks for that row's ranks side by side (``d1`` chunks a pair): phase A sends
that *block* along the slow dimension to the rank of row ``a'`` in the sender's column,
relayed in one receive-copy-send step per hop (shortest way round a ring; its antipode
forwards from even coordinates). It arrives whole in scratch, where it is a *row*: one
source's chunks for every rank of the holder's row. In phase B the holder sends each
row's part ahead in each direction (a contiguous run of the row; two where it wraps round
a ring) as one *segment*, which every rank on its way receives into scratch and sends on
whole, to its farthest member; each member copies its own chunk to the output right
after, in the same thread block (so a thread block's receives share one scratch area,
and only the rows phase A delivers keep scratch of their own). A segment
is not shortened on its way (that would cut it into a step per chunk), so phase B's links
carry chunks past their destination: a mesh line's busiest link carries ``Σ_b (d1 − 1 −
b)`` chunks per source row, where shortened segments need ``(d1/2)²``.

So a rank takes about ``d0`` sends and receives per column hop in phase A, ``2·d0`` per
row position in phase B and one copy per source, not a step per chunk and hop
(:func:`~te_ccl.backends.scale.grid_alltoall.alltoall_elements` counts a plan's). Every
segment keeps one channel on its whole path, and
on a channel each thread block takes the segments that touch it in one order shared by
its line (:func:`_key`): the k-th send of a connection is its k-th receive, and a step
waits only for an earlier segment of its own chain, or (phase B's first sends, the
copies) for phase A's receives, which wait for nothing. The file cannot deadlock,
whatever the slots of a connection.

The schedule (:func:`~te_ccl.backends.scale.grid.grid_moves`) has the file's transfers
chunk by chunk, each segment store-and-forward; the file is timed by its own replay.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from te_ccl.backends.scale.grid import OPS, GridPlan, overflow
from te_ccl.deadline import check
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.verify.msccl.reader import MAX_REACH

__all__ = ["blocks_plan"]

PLANNING = "planning the row AlltoAll"  # what a deadline reached interrupted
CHANNELS = 32  # channels a family's segments are dealt to (within the runtime's): more run at once
_S, _R, _CPY, _RCS = (OPS.index(x) for x in ("s", "r", "cpy", "rcs"))
_IN, _OUT, _SCR = 0, 1, 2  # buffer codes (BUFFERS)
_FAMILIES = 4  # (phase, direction): A+, A−, B+, B−: a chain thread block each per channel
_AREA, _FROM = 1, 2  # a step's offsets in its thread block's area: both, the source's


def _way(src: int, dst: int, d: int, wrap: bool) -> tuple[int, int]:
    """(direction ±1, hops) from coordinate ``src`` to ``dst`` on a line or ring of ``d``:
    the shortest way round a ring, its antipode forwards from even ``src``."""
    if not wrap:
        return (1 if dst > src else -1), abs(dst - src)
    f = (dst - src) % d
    if 2 * f < d or (2 * f == d and src % 2 == 0):
        return 1, f
    return -1, d - f


def _pieces(b: int, d: int, wrap: bool) -> list[tuple[int, int, int]]:
    """(direction, first, last) of the runs of a row that the holder at coordinate ``b``
    sends: the coordinates each way, cut where they wrap round, ascending."""
    out = []
    for step in (1, -1):
        run: list[int] = []
        for x in range(d):
            if x == b or _way(b, x, d, wrap)[0] != step:
                continue
            if run and x != run[-1] + 1:
                out.append((step, run[0], run[-1]))
                run = []
            run.append(x)
        if run:
            out.append((step, run[0], run[-1]))
    return out


def _key(line: int, phase: int, group: int, holder: int, source: int, first: int) -> int:
    """The order in which the thread blocks of one line and channel take their segments,
    as one integer: by phase; by group (phase A: hops; phase B: when the row arrived, its
    phase-A hops); by holder, the farthest along the way first (a rank sends its own
    before it relays, and relays the nearest holder's first, which arrives first); by
    source and first coordinate. The same along a line, so a connection's sends and
    receives match; the line (below :data:`_LINES`) leads, so keys differ between lines."""
    return line * _LINE + (((phase * 64 + group) * 128 + holder) * 4096 + source) * 4096 + first


_LINE = 1 << 38  # keys of one line: below, a segment's order on it
_LINES = 1 << 46  # keys of one family: family · _LINES + key names every segment


class _Plan:
    """Steps and hops as they are made, as rows of Python lists."""

    def __init__(self, n: int) -> None:
        self.scratch = [0] * n
        # rank, family (−1: a local copy), key, op, src buffer, offset, dst buffer,
        # offset, cnt, the step it waits for (−1 none), send peer, receive peer, and
        # whether the offsets are in its thread block's area (_AREA: both; _FROM: src)
        self.steps: list[tuple[int, ...]] = []
        # phase, hop, key, first chunk, cnt, sender, receiver, the hop it waits for
        self.hops: list[tuple[int, ...]] = []

    def step(self, *row: int) -> int:
        self.steps.append(row)
        return len(self.steps) - 1

    def segment(self, ranks: list[int], fam: int, key: int, src: tuple[int, int], cnt: int,
                chunk: int, after: tuple[int, int], members: dict[int, tuple[int, int, int]],
                keep: bool) -> tuple[int, int, int]:
        """One segment along ``ranks`` (holder first): a send, a receive-copy-send per
        relay, a receive at the end, and at each member (position on the way → its
        chunks' offset in the segment, output offset, count) a copy to the output right
        after, in the same thread block. A receive lands in its thread block's area,
        which the next overwrites (nothing reads it later), but the last where ``keep``:
        fresh scratch. ``after``: the (step, hop) the holder's send waits for. Returns
        (the last receive's step, its scratch offset, its hop)."""
        step_w, hop_w = after
        self.step(ranks[0], fam, key, _S, *src, _SCR, -1, cnt, step_w, ranks[1], -1, 0)
        got, off, hop = step_w, 0, hop_w
        last = len(ranks) - 1
        for h in range(1, last + 1):
            w = ranks[h]
            fresh = keep and h == last
            if fresh:
                off = self.scratch[w]
                self.scratch[w] += cnt
            got = self.step(w, fam, key, _RCS if h < last else _R, _SCR, off, _SCR, off,
                            cnt, -1, ranks[h + 1] if h < last else -1, ranks[h - 1],
                            0 if fresh else _AREA)
            self.hops.append((fam >= 2, h, key, chunk, cnt, ranks[h - 1], w, hop))
            hop = len(self.hops) - 1
            if h in members:
                at, out, k = members[h]
                self.step(w, fam, key, _CPY, _SCR, at, _OUT, out, k, -1, -1, -1, _FROM)
        return got, off, hop


@lru_cache(maxsize=1)
def blocks_plan(dims: tuple[int, ...], wrap: bool, k: int, limits: RuntimeLimits = MSCCL
                ) -> GridPlan | str:
    """The file of the row AlltoAll with ``k`` chunks per pair, or why it does not fit
    ``limits``. Built once for the input check, the schedule and its lowering (which
    runs in a process forked after the schedule was built)."""
    if len(dims) != 2 or min(dims) < 3:
        return "the row AlltoAll takes 2D grids of at least 3 ranks a side"
    d0, d1 = dims
    n = d0 * d1
    if d1 * k > limits.max_count - 1:
        return (f"a block of {d1 * k} chunks (a row × {k}) is more than a step carries "
                f"({limits.max_count - 1})")
    p = _Plan(n)
    fam = {(0, 1): 0, (0, -1): 1, (1, 1): 2, (1, -1): 3}
    held: dict[tuple[int, int], tuple[int, int, int, int, int]] = {}
    for b in range(d1):  # phase A: the block for row a2 from (a, b), along the slow dimension
        check(PLANNING)
        for a in range(d0):
            held[(a * d1 + b, a)] = (_IN, a * d1 * k, -1, -1, 0)
            for a2 in range(d0):
                if a2 == a:
                    continue
                step, hops = _way(a, a2, d0, wrap)
                ranks = [((a + step * h) % d0) * d1 + b for h in range(hops + 1)]
                order = d0 - 1 - a if step > 0 else a
                got, off, hop = p.segment(ranks, fam[(0, step)], _key(b, 0, hops, order, 0, 0),
                                          (_IN, a2 * d1 * k), d1 * k,
                                          ((a * d1 + b) * n + a2 * d1) * k, (-1, -1), {},
                                          True)
                held[(ranks[-1], a)] = (_SCR, off, got, hop, hops)
    for a2 in range(d0):  # its own chunk of each row to the output; phase B: the runs
        check(PLANNING)
        for b in range(d1):
            v = a2 * d1 + b
            for a in range(d0):
                buf, off, got, hop, hops_a = held[(v, a)]
                s = a * d1 + b  # the row's source
                p.step(v, -1, 0, _CPY, buf, off + b * k, _OUT, s * k, k, got, -1, -1, 0)
                for step, lo, hi in _pieces(b, d1, wrap):
                    dist = {x: _way(b, x, d1, wrap)[1] for x in range(lo, hi + 1)}
                    ranks = [a2 * d1 + (b + step * h) % d1 for h in range(max(dist.values()) + 1)]
                    members = {dist[x]: ((x - lo) * k, s * k, k) for x in range(lo, hi + 1)}
                    order = d1 - 1 - b if step > 0 else b
                    p.segment(ranks, fam[(1, step)], _key(a2, 1, hops_a, order, a, lo),
                              (buf, off + lo * k), (hi - lo + 1) * k,
                              (s * n + a2 * d1 + lo) * k, (got, hop), members, False)
    return _assemble(p, n, k, limits)


def _deal(key: np.ndarray, family: np.ndarray, rank: np.ndarray, chain: np.ndarray,
          limits: RuntimeLimits) -> tuple[int, np.ndarray] | str:
    """(channels, each step's channel): the segments of each family and line dealt
    round-robin in key order (a segment's steps share its key) to :data:`CHANNELS`
    channels, or fewer if the runtime has fewer; or why a chain thread block would take
    more than ``max_steps``."""
    chans = min(CHANNELS, limits.max_channels)
    segments, which = np.unique(np.where(chain, family * _LINES + key, -1), return_inverse=True)
    line = segments // _LINE  # family and line
    nth = np.arange(len(segments)) - np.searchsorted(line, line)
    chan = np.where(chain, nth[which] % chans, 0)
    per = np.bincount(((rank * _FAMILIES + family) * chans + chan)[chain])
    if len(per) and per.max() > limits.max_steps:
        return (f"a chain thread block takes {int(per.max())} steps, more than "
                f"{limits.max_steps}")
    return chans, chan


def _assemble(p: _Plan, n: int, k: int, limits: RuntimeLimits) -> GridPlan | str:
    """Thread blocks (the chains' first: only they are waited for; then local copies,
    ``max_steps`` each), steps in key order, dependencies; or why the runtime cannot
    hold it."""
    check(PLANNING)
    cols = np.array(p.steps, dtype=np.int64).reshape(-1, 13).T
    rank, family, key, op, sb, so, db, do, cnt, wait, send, recv, area = cols
    ns = len(rank)
    chain = family >= 0
    dealt = _deal(key, family, rank, chain, limits)
    if isinstance(dealt, str):
        return dealt
    chans, chan = dealt
    local = np.flatnonzero(~chain)
    by = local[np.argsort(rank[local], kind="stable")]  # by rank, then made
    lane = np.zeros(ns, dtype=np.int64)
    lane[by] = (np.arange(len(by)) - np.searchsorted(rank[by], rank[by])) // limits.max_steps
    tb = np.where(chain, family * chans + chan, _FAMILIES * chans + lane)
    span = _FAMILIES * chans + ns
    blocks, block = np.unique(rank * span + tb, return_inverse=True)
    block_rank = blocks // span
    block_id = np.arange(len(blocks)) - np.searchsorted(block_rank, np.arange(n))[block_rank]
    scratch = _areas(np.array(p.scratch, dtype=np.int64), block, block_rank, area, so, do,
                     int(cnt.max()))
    reach = int(scratch.sum()) + 2 * n * n * k  # with every rank's input and output
    if reach > MAX_REACH:  # the file would be written and then refused
        return (f"its buffers reach {reach:,} chunks in all, more than the {MAX_REACH:,} the "
                "verifier models")
    sequence = np.lexsort((np.arange(ns), np.where(chain, key, 0), block))
    first_step = np.searchsorted(block[sequence], np.arange(len(blocks) + 1))
    slot = np.empty(ns, dtype=np.int64)
    slot[sequence] = np.arange(ns) - first_step[block[sequence]]
    waits = np.flatnonzero(wait >= 0)
    target = wait[waits]
    depid = np.full(ns, -1, dtype=np.int64)
    deps = np.full(ns, -1, dtype=np.int64)
    depid[waits], deps[waits] = block_id[block[target]], slot[target]
    hasdep = np.zeros(ns, dtype=np.int64)
    hasdep[target] = 1
    why = overflow(n, limits, block_rank, rank, np.diff(first_step), block_id[block[target]])
    if why:
        return why
    steps = np.stack([op, sb, so, db, do, cnt, depid, deps, hasdep], axis=1)[sequence]
    peers = np.full((len(blocks), 2), -1, dtype=np.int64)
    np.maximum.at(peers, block, np.stack([send, recv], axis=1))
    table = np.stack([block_rank, peers[:, 0], peers[:, 1],
                      np.where(blocks % span < _FAMILIES * chans, blocks % span % chans, 0),
                      first_step[:-1]], axis=1)
    return GridPlan(chans, n * k, 0.0, scratch, table, steps, _moves(p))


def _areas(scratch: np.ndarray, block: np.ndarray, block_rank: np.ndarray, area: np.ndarray,
           so: np.ndarray, do: np.ndarray, size: int) -> np.ndarray:
    """Each rank's scratch with an area of ``size`` chunks after it for each thread block
    that receives into one; the offsets of the steps in an area (``area``) made absolute,
    in place. A thread block takes its steps one after the other, and a member copies
    its chunk out right after the receive, so one area a thread block serves all its
    relays."""
    used = np.unique(block[area > 0])
    nth = np.arange(len(used)) - np.searchsorted(block_rank[used], block_rank[used])
    base = np.full(len(block_rank), -1, dtype=np.int64)
    base[used] = scratch[block_rank[used]] + nth * size
    into = area == _AREA
    so[area > 0] += base[block[area > 0]]
    do[into] += base[block[into]]
    return scratch + np.bincount(block_rank[used], minlength=len(scratch)) * size


def _moves(p: _Plan) -> np.ndarray:
    """The hops as the plan's moves rows (first chunk, cnt, sender, receiver, the row it
    waits for), ordered so that a hop follows those it waits for: phase A first, then by
    hop along the segment, then key."""
    rows = np.array(p.hops, dtype=np.int64).reshape(-1, 8)
    phase, hop, key, chunk, cnt, u, w, after = rows.T
    order = np.lexsort((key, hop, phase))
    renumber = np.empty(len(rows), dtype=np.int64)
    renumber[order] = np.arange(len(rows))
    after = np.where(after >= 0, renumber[np.maximum(after, 0)], -1)
    return np.stack([chunk, cnt, u, w, after], axis=1)[order]
