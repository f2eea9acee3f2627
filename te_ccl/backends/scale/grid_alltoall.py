"""AlltoAll on a mesh or torus in dimension order, relayed in groups one step carries.

A chunk travels one dimension after the other, in one of ``m`` orders (its *family*: the
difference of its destination's and source's coordinates on the slowest dimension, mod
``m``; family ``f`` starts at dimension ``f`` and goes round): with one order for every
chunk the links of the first dimension are busy early and those of the last late; with
the families every dimension carries a share of every phase. In the phase of
dimension ``p`` a rank holds *bundles*: one family's chunks of one source for the ranks
that share the holder's coordinates in the dimensions crossed so far, in contiguous
slots ordered by coordinate in the family's order (family 0 reads the input buffer as it
is; a source first copies its other families' chunks into scratch in that order). Along
``p`` a bundle has one *element* per coordinate the family reaches (``E_p`` chunks). The
holder keeps its own element; the others leave in *groups*: the elements ahead in one
direction (shortest way round a torus ring; its antipode by the holder's parity),
contiguous in slots and at most ``max_count − 1`` chunks, so one step carries a group. A
group is received into scratch at every rank on its way, which keeps its first element
when it is that rank's (a bundle for the next phase, or at the last phase its chunk,
copied to the output) and sends the rest on.

Steps per rank stay far below the reader's limit where one step per chunk and hop does
not fit (mesh 16×16: the concurrent-flow routes give rank 120 4,069 receives, over the
3,838 steps the reader holds; here fewer, :func:`grid_elements` counts them). Every step
moves one group over one link, so the file is deadlock-free by construction: every
thread block takes its transfers in the order one list schedule starts them (earlier
phases first, then the groups with most hops to go), and a step waits only for a receive
that started before it, a local copy, or (:func:`~te_ccl.backends.scale.grid.in_turn`) the
last send of the channel before its own on the link: where a chunk takes at least a link's
latency (:data:`IN_TURN_UP_TO`), a link's channels take its groups in turn, so the link
carries them in the list schedule's order, which keeps it busy.

The schedule (:func:`solve_grid_alltoall`) has the same transfers chunk by chunk, each
group store-and-forward on its links in that order; the file is timed by its own replay.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np

from te_ccl.backends.scale.grid import (
    OPS,
    GridPlan,
    channels,
    grid_alpha,
    grid_moves,
    grid_shape,
    in_turn,
    neighbour,
    overflow,
    spread_channels,
)
from te_ccl.backends.scale.grid import coords as _coords
from te_ccl.backends.scale.grid_blocks import blocks_plan
from te_ccl.backends.scale.moves import Moves
from te_ccl.collective.model import Collective
from te_ccl.deadline import TimeLimitReached, check, left, slowdown
from te_ccl.model.footprint import MAX_TRANSFERS, row_hops, row_late
from te_ccl.model.problem import Problem
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.topology.model import Topology

__all__ = ["grid_plan", "grid_hops", "grid_elements", "alltoall_elements",
           "solve_grid_alltoall", "grid_takes", "METHOD", "GRID_FROM_HOPS"]

METHOD = "grid-alltoall"
PLANNING = "planning the grid AlltoAll"  # what a deadline reached interrupted
GRID_FROM_HOPS = 200_000  # chunk-hops from which a file of one step per chunk and hop is no
#                           first file: torus 16×16's 524,288 take the lowering too long for
#                           one, and mesh 16×16's busiest rank (696,320) overflows
LAST_GROUP = 4  # elements a group of the last phase carries at most (see _per_group)
IN_TURN_UP_TO = 1.0  # a link's latency in chunk times up to which its channels take its
#                      groups in turn (in_turn): one channel at a time keeps the link busy
#                      only while a group lasts as long as the latency, after which the
#                      receive frees its connection's slot (two under Simple); above, the
#                      channels are dealt round-robin and run at once


def _per_group(e: int, last: bool, limits: RuntimeLimits) -> int:
    """Elements of ``e`` chunks a group carries: one before the last phase (a bundle then
    reaches every rank of its line soon, which starts the next phase sooner), at most
    :data:`LAST_GROUP` in the last (short groups keep store-and-forward pipelined: a line
    of 16 then keeps its middle link busy throughout), within a step's ``max_count − 1``."""
    return max(1, min(LAST_GROUP if last else 1, (limits.max_count - 1) // e))


def _family(cs: int, cd: int, d: int, wrap: bool, m: int) -> int:
    """The family of a chunk whose source and destination sit at ``cs`` and ``cd`` on the
    slowest dimension (of ``d`` ranks): their difference (round a ring, forwards) mod
    ``m``. Family ``f`` crosses the dimensions from ``f`` on (:func:`_order`)."""
    return ((cd - cs) % d if wrap else cd - cs) % m


def _order(f: int, m: int) -> tuple[int, ...]:
    """The dimensions in the order family ``f`` crosses them: ``f``, ``f + 1``, … round."""
    return tuple((f + i) % m for i in range(m))


def _present(c0: int, f: int, d: int, wrap: bool, m: int) -> list[int]:
    """Coordinates on the slowest dimension of family ``f``'s destinations from ``c0``."""
    return [x for x in range(d) if _family(c0, x, d, wrap, m) == f]


def _dests(s: int, f: int, dims: tuple[int, ...], wrap: bool) -> np.ndarray:
    """Source ``s``'s destinations of family ``f`` in slot order: by coordinate along the
    dimensions in family ``f``'s order (rank order for family 0)."""
    m, grid = len(dims), _grid(dims)
    keep = np.flatnonzero(_family(grid[0, s], grid[0], dims[0], wrap, m) == f)
    return keep[np.lexsort(grid[list(reversed(_order(f, m)))][:, keep])]


@lru_cache(maxsize=2)
def _grid(dims: tuple[int, ...]) -> np.ndarray:
    """Every rank's coordinates, a row per dimension."""
    return np.indices(dims).reshape(len(dims), -1)


def _real_chunks(dims: tuple[int, ...], wrap: bool, k: int) -> np.ndarray:
    """The chunk id behind each id of the plan's moves, which number a source's chunks
    family by family in slot order (so that a group carries consecutive ids)."""
    m, n = len(dims), math.prod(dims)
    dest = np.concatenate([_dests(s, f, dims, wrap) + s * n
                           for s in range(n) for f in range(m)])
    return (dest[:, None] * k + np.arange(k)).reshape(-1)


def _lanes(runs: list[int], cap: int) -> list[int]:
    """The local thread block of each run of copies, in order: a new one where a run would
    take the block over ``cap`` steps (a send waits for the last copy of its run)."""
    out, lane, used = [], 0, 0
    for z in runs:
        if used and used + z > cap:
            lane, used = lane + 1, 0
        out.append(lane)
        used += z
    return out


def _groups(c: int, d: int, wrap: bool, per_group: int, slots: dict[int, int]
            ) -> list[tuple[int, list[tuple[int, int]]]]:
    """(direction, [(coordinate, hops)]) of the elements a holder at coordinate ``c`` of a
    line or ring of ``d`` sends (``slots``: the bundle's coordinates, each to its slot):
    runs contiguous in slots, at most ``per_group`` each."""
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
            if x not in slots:
                continue
            if run and (slots[x] - slots[run[-1][0]] != step or len(run) == per_group):
                out.append((step, run))
                run = []
            run.append((x, h))
        if run:
            out.append((step, run))
    return out


def grid_plan(dims: tuple[int, ...], wrap: bool, k: int, alpha: float = 0.0,
              limits: RuntimeLimits = MSCCL) -> GridPlan | str:
    """The file of the grid AlltoAll with ``k`` chunks per pair, or where its groups do
    not fit ``limits``, the row AlltoAll's (:mod:`.grid_blocks`: whole rows relayed, far
    fewer steps), or why neither fits (an element over ``max_count − 1`` chunks; more
    channels, thread blocks or elements per rank than the runtime holds). Built once for
    the schedule and its lowering (which runs in a process forked after the schedule was
    built)."""
    return _either(tuple(dims), wrap, k, alpha, limits)[0]


@lru_cache(maxsize=2)
def _either(dims: tuple[int, ...], wrap: bool, k: int, alpha: float,
            limits: RuntimeLimits) -> tuple[GridPlan | str, bool]:
    """(:func:`grid_plan`, whether it is the row AlltoAll's)."""
    plan = _plan(dims, wrap, k, alpha, limits)
    if not isinstance(plan, str):
        return plan, False
    rows = blocks_plan(dims, wrap, k, limits)
    return (rows, True) if not isinstance(rows, str) else (f"{plan}; by rows: {rows}", False)


# a bundle: holder, source, family, buffer, offset, slots by coordinate (the input buffer)
# or compact, first chunk's id in the moves' numbering, the transfer that brought it, and
# the copy each element waits for (a list per element, or one for all; −1 none)
_Bundle = tuple[int, int, int, int, int, bool, int, int, "list[int] | int"]


def _spread(m: int, alpha: float, limits: RuntimeLimits) -> int:
    """Channels a link's groups are dealt to at least: where a chunk takes less than a
    link's latency (``alpha`` chunk times, above :data:`IN_TURN_UP_TO`), enough that the
    sends its connections hold cover that latency (a connection holds few: Simple's
    depth, the shallowest), so a link's groups wait for the link, not for slots; with
    the receiving thread blocks of a rank's ``2m`` links within half of those a step can
    wait for (the rest: its local ones). Else one (channels that race for a link serve
    it out of order)."""
    if alpha <= IN_TURN_UP_TO:
        return 1
    cover = math.ceil(alpha / max(1, limits.outstanding_sends("Simple")))
    return max(1, min(limits.max_channels, cover, (limits.max_depid + 1) // (4 * m)))


def _plan(dims: tuple[int, ...], wrap: bool, k: int, alpha: float,
          limits: RuntimeLimits) -> GridPlan | str:
    """:func:`grid_plan`'s groups (cached by :func:`_either`): channels spread to cover a
    link's latency (:func:`_spread`) where the runtime holds the file that makes, else as
    few as hold :data:`~te_ccl.backends.scale.grid.PER_CHANNEL` groups each."""
    spread = _spread(len(dims), alpha, limits)
    plan = _spread_plan(dims, wrap, k, alpha, limits, spread)
    if isinstance(plan, str) and spread > 1:
        return _spread_plan(dims, wrap, k, alpha, limits, 1)
    return plan


def _spread_plan(dims: tuple[int, ...], wrap: bool, k: int, alpha: float,
                 limits: RuntimeLimits, spread: int) -> GridPlan | str:
    """The plan with each link's groups on at least ``spread`` channels
    (:func:`~te_ccl.backends.scale.grid.spread_channels`)."""
    m, n = len(dims), math.prod(dims)
    size0 = math.prod(dims[1:]) * k
    if size0 > limits.max_count - 1:
        return (f"an element of {size0} chunks (the ranks behind the slowest dimension "
                f"× {k}) is more than a step carries ({limits.max_count - 1})")
    need, v = grid_elements(dims, wrap, k, limits, spread)
    if need > limits.max_elements:
        return (f"its rank {v} reads {need:,} XML elements, more than the "
                f"{limits.max_elements} the runtime's reader holds")
    t = _Transfers()
    # rank, buffer, offset, to buffer, offset, the transfer it follows, local block
    copies: list[tuple[int, int, int, int, int, int, int]] = []
    scratch = [0] * n
    bundles: list[_Bundle] = []
    own_lane = []
    for s in range(n):
        check(PLANNING)
        first = 0  # the source's first chunk of the family, in the moves' numbering
        runs: list[int] = []
        for f in range(m):
            dest = _dests(s, f, dims, wrap).tolist()
            if f and dest:  # into scratch in slot order: the family's elements contiguous
                per = len(dest) // dims[f]
                lanes = _lanes(runs + [per] * dims[f], limits.max_steps)[len(runs):]
                runs += [per] * dims[f]
                base = scratch[s]
                scratch[s] += len(dest) * k
                ends = []
                for j, lane in enumerate(lanes):
                    for q in range(j * per, (j + 1) * per):
                        copies.append((s, 0, dest[q] * k, 2, base + q * k, -1, lane))
                    ends.append(len(copies) - 1)
                bundles.append((s, s, f, 2, base, False, first, -1, ends))
            elif dest:
                bundles.append((s, s, f, 0, 0, True, first, -1, -1))
            first += len(dest)
        own_lane.append(_lanes(runs + [1], limits.max_steps)[-1])
    gid = 0
    for i in range(m):
        check(PLANNING)
        last, later = i == m - 1, (m - 1 - i) * max(dims)  # an earlier phase goes first
        following: list[_Bundle] = []
        for v, s, f, buf, off, sparse, first, filled, waits in bundles:
            order = _order(f, m)
            p, c = order[i], _coords(v, dims)[order[i]]
            present = (_present(_coords(s, dims)[0], f, dims[0], wrap, m) if p == 0
                       else range(dims[p]))
            slots = {x: j for j, x in enumerate(present)}
            per = math.prod(len(_present(_coords(s, dims)[0], f, dims[0], wrap, m))
                            if q == 0 else dims[q] for q in order[i + 1:])
            e = per * k

            def slot(x: int, off: int = off, sparse: bool = sparse,
                     slots: dict[int, int] = slots, e: int = e) -> int:
                return off + (x if sparse else slots[x]) * e

            def wait(x: int, waits: list[int] | int = waits,
                     slots: dict[int, int] = slots) -> int:
                return waits[slots[x]] if isinstance(waits, list) else waits

            if c in slots:
                if not last:
                    following.append((v, s, f, buf, slot(c), False,
                                      first + slots[c] * per, filled, wait(c)))
                else:
                    copies.append((v, buf, slot(c), 1, s * k, filled,
                                   own_lane[s] if filled < 0 else -1))
            for step, elements in _groups(c, dims[p], wrap, _per_group(e, last, limits),
                                          slots):
                gid += 1
                lo = min(x for x, _ in elements)
                cnt, sbuf, soff, u, ready = len(elements) * e, buf, slot(lo), v, filled
                copied = max(wait(x) for x, _ in elements)
                chunk = (s * n + first + slots[lo] * per) * k  # the group's first chunk id
                far = elements[-1][1]
                for hop in range(1, far + 1):
                    w = neighbour(u, p, step, dims, wrap)
                    got = scratch[w]
                    scratch[w] += cnt
                    prio = (hop - far - later) * _GIDS + gid
                    ready = t.add(prio, u, w, cnt, sbuf, soff, got, ready,
                                  copied if hop == 1 else -1, chunk)
                    sbuf, soff, u = 2, got, w
                    if elements[0][1] == hop:  # w keeps its element
                        x = elements.pop(0)[0]
                        kept = got if step == 1 else got + cnt - e
                        if step == 1:
                            soff, chunk = got + e, chunk + e
                        cnt -= e
                        if last:
                            copies.append((w, 2, kept, 1, s * k, ready, -1))
                        else:
                            following.append((w, s, f, 2, kept, False,
                                              first + slots[x] * per, ready, -1))
                    if not elements:
                        break
        bundles = following
    return _assemble(n, k, t, copies, scratch, limits, alpha, spread)


_GIDS = 1 << 32  # groups fewer than this: a priority is (hops) · _GIDS + group, where an
#                 earlier phase comes first, and in a phase the group with most hops to go
LOCAL, RECV, SEND = 0, 1, 2  # thread block kinds, in the order of their ids on a rank


class _Transfers:
    """Group transfers as rows, in the order they are made."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, ...]] = []

    def add(self, prio: int, u: int, w: int, cnt: int, sbuf: int, soff: int, doff: int,
            after: int, copied: int, chunk: int) -> int:
        """Add one (``after``: the transfer it waits for, ``copied``: the local copy, −1
        none); returns its row."""
        self.rows.append((prio, u, w, cnt, sbuf, soff, doff, after, copied, chunk))
        return len(self.rows) - 1

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The columns: priority, sender, receiver, cnt, buffer, offset, offset at the
        receiver, the transfer and the copy it waits for, first chunk."""
        return tuple(np.array(self.rows, dtype=np.int64).reshape(-1, 10).T)


def _assemble(n: int, k: int, t: _Transfers,
              copies: list[tuple[int, int, int, int, int, int, int]],
              scratch: list[int], limits: RuntimeLimits, alpha: float, spread: int
              ) -> GridPlan | str:
    """Channels per link (:func:`channels`, at least ``spread``; up to
    :data:`IN_TURN_UP_TO`, taken in turn:
    :func:`in_turn`), thread blocks (local ones first, then receiving ones: the waited-for
    ids stay small), steps in start order, dependencies; or why the runtime cannot hold
    it. A send waits for the receive that brought its chunks, or the local copy that put
    them in slot order; a copy to the output follows that receive in its thread block; a
    nop before a channel's first send waits for the previous channel's last where they
    take turns."""
    check(PLANNING)
    prio, u, w, cnt, sbuf, soff, doff, after, copied, chunk = t.arrays()
    link = u * n + w
    waiting = np.flatnonzero(after >= 0)
    dealt = channels(prio.tolist(), link, cnt.tolist(),
                     np.stack([waiting, after[waiting]], axis=1), alpha, limits, spread)
    if isinstance(dealt, str):
        return dealt
    position, finish, chan, nchannels = dealt
    turn = np.zeros((0, 2), dtype=np.int64)
    if alpha <= IN_TURN_UP_TO:
        chan, turn = in_turn(position, link)
    nt, nn = len(u), len(turn)
    c_rank, c_buf, c_off, c_dbuf, c_doff, c_after, c_lane = np.array(
        copies, dtype=np.int64).reshape(-1, 7).T
    nc = len(c_rank)
    brought = c_after >= 0
    ca = np.where(brought, c_after, 0)
    opener, last = turn.T  # a channel's first send, and the previous channel's last send
    # per step (sends, receives, copies, nops before the openers): rank, block kind, peer
    # (local blocks: their lane), channel, key
    rank = np.concatenate([u, w, c_rank, u[opener]])
    kind = np.concatenate([np.full(nt, SEND), np.full(nt, RECV),
                           np.where(brought, RECV, LOCAL), np.full(nn, SEND)]).astype(np.int64)
    peer = np.concatenate([w, u, np.where(brought, u[ca], c_lane), w[opener]])
    chans = np.concatenate([chan, chan, np.where(brought, chan[ca], 0), chan[opener]])
    key = np.concatenate([2 * position, 2 * position, np.where(brought, 2 * position[ca] + 1, -1),
                          2 * position[opener] - 1])
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
    own = np.where(after >= 0, nt + after, np.where(copied >= 0, 2 * nt + copied, -1))
    # an opener that waits for nothing else waits as its nop does (a nop needs a waiting step)
    own[opener] = np.where(own[opener] >= 0, own[opener], last)
    waits = np.concatenate([np.flatnonzero(own >= 0), 2 * nt + nc + np.arange(nn)])
    target = np.concatenate([own[own >= 0], last])
    depid = np.full(len(order), -1, dtype=np.int64)
    deps = np.full(len(order), -1, dtype=np.int64)
    depid[waits], deps[waits] = block_id[block[target]], slot[target]
    hasdep = np.zeros(len(order), dtype=np.int64)
    hasdep[target] = 1
    why = overflow(n, limits, block_rank, rank, np.diff(first_step), block_id[block[target]])
    if why:
        return why
    ops = np.concatenate([np.zeros(nt), np.ones(nt), np.full(nc, 2),
                          np.full(nn, OPS.index("nop"))]).astype(np.int64)
    none = np.full(nn, -1)
    steps = np.empty((len(order), 9), dtype=np.int64)  # filled a column at a time: fast
    for j, col in enumerate((ops, np.concatenate([sbuf, sbuf, c_buf, none]),
                             np.concatenate([soff, soff, c_off, none]),
                             np.concatenate([np.full(2 * nt, 2), c_dbuf, none]),
                             np.concatenate([doff, doff, c_doff, none]),
                             np.concatenate([cnt, cnt, np.full(nc, k),
                                             np.zeros(nn, dtype=np.int64)]),
                             depid, deps, hasdep)):
        steps[:, j] = col[order]
    kinds, peers = (blocks % span) // nchannels // (n + 1), (blocks % span) // nchannels % (n + 1)
    table = np.stack([block_rank, np.where(kinds == SEND, peers, -1),
                      np.where(kinds == RECV, peers, -1), blocks % nchannels, first_step[:-1]],
                     axis=1)
    started = np.argsort(position)
    moves = np.stack([chunk, cnt, u, w, np.where(after >= 0, position[after], -1)],
                     axis=1)[started]
    return GridPlan(nchannels, n * k, finish, np.array(scratch, dtype=np.int64), table, steps,
                    moves)


def grid_elements(dims: tuple[int, ...], wrap: bool, k: int,
                  limits: RuntimeLimits = MSCCL, spread: int = 1) -> tuple[int, int]:
    """(the most XML elements one rank reads for the grid plan, that rank) by arithmetic,
    without building it: the ``<algo>``, every ``<gpu>``, and the rank's steps and thread
    blocks, with a nop per link channel after the first (channels in turn; a plan whose
    channels are dealt round-robin reads that many fewer). In the phase of family ``f``
    along dimension ``p`` a rank holds a bundle per source that differs from it only in
    the dimensions crossed before (on the slowest one, only where the family goes), and
    the groups of a bundle depend only on its holder's coordinate along ``p`` (and, along
    the slowest, on which coordinates the family reaches from there): each group hop is a
    send at one end and a receive at the other, each link takes a thread block per
    :data:`~te_ccl.backends.scale.grid.PER_CHANNEL` groups, and at least ``spread``, at
    each end, every chunk delivered is one copy, every
    chunk of the later families one copy into scratch first (in local thread blocks of
    ``max_steps``, with the rank's chunk to itself).

    >>> grid_elements((16, 16), False, 1)[0] <= MSCCL.max_elements
    True
    """
    m, n, d0 = len(dims), math.prod(dims), dims[0]
    grid = _grid(dims)
    x0 = grid[0]
    reach = np.array([[len(_present(c, f, d0, wrap, m)) for f in range(m)]
                      for c in range(d0)])  # destinations' coordinates per source's, family
    sources = np.array([[sum(_family(c, x, d0, wrap, m) == f for c in range(d0))
                         for f in range(m)] for x in range(d0)])
    steps = n + (n // d0) * reach[x0, 1:].sum(axis=1)  # a copy per source, and into scratch
    lanes = np.array([_lanes([reach[c, f] * n // (d0 * dims[f]) for f in range(1, m)
                              if reach[c, f] for _ in range(dims[f])] + [1],
                             limits.max_steps)[-1] + 1 for c in range(d0)])
    load = np.zeros((m, 2, n), dtype=np.int64)  # groups on the link from a rank, + and −
    for f in range(m):
        order = _order(f, m)
        for i, p in enumerate(order):
            d, last = dims[p], i == m - 1
            per_group = _per_group(k, True, limits) if last else 1
            held = math.prod(dims[q] for q in order[:i] if q)  # bundles, but for dimension 0
            ends = np.zeros(d, dtype=np.int64)       # group hops sent or received at x
            hops = np.zeros((d, 2), dtype=np.int64)  # groups on the link from x, + and −
            for c in range(d):
                present = _present(c, f, d, wrap, m) if p == 0 else range(d)
                slots = {x: j for j, x in enumerate(present)}
                for step, elements in _groups(c, d, wrap, per_group, slots):
                    for h in range(1, elements[-1][1] + 1):
                        x = (c + step * (h - 1)) % d
                        ends[x] += 1
                        ends[(x + step) % d] += 1
                        hops[x, int(step < 0)] += 1
            if p == 0:
                weight = np.full(n, held)
            elif 0 in order[:i]:
                weight = held * sources[x0, f]
            else:
                weight = held * (reach[x0, f] > 0)
            steps += weight * ends[grid[p]]
            load[p] += weight * hops[grid[p]].T
    tbs = spread_channels(load, spread, limits)
    steps += (tbs - (tbs > 0)).sum(axis=(0, 1))  # a nop before each later channel's opener
    blocks = lanes[x0] + tbs.sum(axis=(0, 1))
    for p in range(m):
        for way, step in ((0, 1), (1, -1)):  # receiving from the neighbour behind
            blocks += np.roll(tbs[p, way].reshape(dims), step, axis=p).reshape(n)
    elements = 1 + n + steps + blocks
    v = int(np.argmax(elements))
    return int(elements[v]), v


def alltoall_elements(dims: tuple[int, ...], wrap: bool, k: int,
                      limits: RuntimeLimits = MSCCL) -> tuple[int, int]:
    """(the most XML elements one rank reads, that rank) of the file :func:`grid_plan`
    writes: the groups' by arithmetic (:func:`grid_elements`), or where they overflow the
    reader, the row AlltoAll's, counted on its plan (built once, as the compile builds
    it); the groups' where neither fits."""
    need, v = grid_elements(dims, wrap, k, limits)
    if need <= limits.max_elements:
        return need, v
    rows = blocks_plan(tuple(dims), wrap, k, limits)
    if isinstance(rows, str):
        return need, v
    block_rank = rows.blocks[:, 0]
    steps = np.diff(np.r_[rows.blocks[:, 4], len(rows.steps)])
    n = math.prod(dims)
    elements = 1 + n + np.bincount(block_rank, minlength=n) + np.bincount(
        block_rank, weights=steps, minlength=n).astype(np.int64)
    return int(elements.max()), int(np.argmax(elements))


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


def _rows_in_time(dims: tuple[int, ...], wrap: bool, k: int) -> None:
    """Where only the row AlltoAll holds this AlltoAll in memory (more chunk-hops than
    :data:`~te_ccl.model.footprint.MAX_TRANSFERS`), raise :class:`TimeLimitReached`
    before planning if its file (its chunk-hops at their CPU pace, times the slowdown
    measured by now, more telling than the input check's at the start) takes longer than
    the time left: planning would only use up the limit."""
    if len(dims) != 2 or k * grid_hops(dims, wrap) <= MAX_TRANSFERS:
        return
    need = row_late(row_hops((dims[0], dims[1]), wrap, k), slowdown())
    if need is not None:
        raise TimeLimitReached(f"the row AlltoAll's file, about {need:.2g} s here, cannot be "
                               f"planned and written in the {left():.2g} s left")


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
    _rows_in_time(dims, wrap, k)
    plan, rows = _either(dims, wrap, k, grid_alpha(topology, problem.chunk_bytes), MSCCL)
    if isinstance(plan, str):
        return None
    moves = grid_moves(topology, n, plan, next(iter(timings.values())), PLANNING)
    cnt = plan.moves[:, 1]
    if rows:  # its moves number the chunks as they are
        notes = (f"row AlltoAll: blocks along dimension 0, then row segments along dimension "
                 f"1, relayed whole: {len(cnt):,} hops of up to {int(cnt.max())} chunks in one "
                 f"step each, on {plan.nchannels} channel(s)",)
        return moves, notes
    moves = replace(moves, chunk=_real_chunks(dims, wrap, k)[moves.chunk])
    notes = (f"grid AlltoAll: dimension by dimension in {len(dims)} order(s), "
             f"{len(cnt):,} groups of up to {int(cnt.max())} chunks relayed in one step each, "
             f"on {plan.nchannels} channel(s)",)
    return moves, notes
