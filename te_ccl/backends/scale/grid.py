"""What the grid methods share: the mesh or torus they take, the plan of a whole file as
arrays, the list schedule that orders its group transfers, and the moves that time them.

A grid method (:mod:`.grid_alltoall`, :mod:`.grid_lines`) builds the MSCCL program
directly, with steps of ``cnt > 1`` (a group of contiguous chunks per step), so the
lowering's passes (one step per chunk) never see a million transfers; the schedule has
the same transfers chunk by chunk (:func:`grid_moves`), and the file is timed by its
own replay.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from te_ccl.backends.scale.moves import Moves
from te_ccl.deadline import check
from te_ccl.model.epochs import LinkTiming
from te_ccl.runtime_limits import RuntimeLimits
from te_ccl.topology.model import Topology

__all__ = ["BUFFERS", "OPS", "GridPlan", "grid_shape", "coords", "neighbour", "grid_alpha",
           "list_order", "channels", "spread_channels", "in_turn", "grid_moves", "overflow",
           "PER_CHANNEL"]

BUFFERS = ("i", "o", "s")  # buffer codes of a plan's steps
OPS = ("s", "r", "cpy", "nop", "rrc", "rcs")  # step codes
PER_CHANNEL = 32  # transfers of a link per channel: a receive adds at most one copy, so a
#                   thread block holds at most 64 steps, and waits for nothing of its own


@dataclass(frozen=True)
class GridPlan:
    """A whole file as arrays.

    ``blocks``: a row per thread block, by rank then id: rank, send peer, receive peer,
    channel, its first row in ``steps``. ``steps``: a row per step, thread block by thread
    block in order: op and buffers (codes into :data:`OPS`, :data:`BUFFERS`), source
    buffer, offset, destination buffer, offset, cnt, depid, deps, hasdep. ``moves``: a row
    per group transfer, in the order the list schedule starts them: first chunk id,
    chunks, sender, receiver, the row of the transfer whose arrival the sender waits for
    (−1: none, or see ``waits``). ``waits``: (row, row it waits for) pairs of ``moves``
    where a sender waits for several arrivals (empty where ``after`` says it all).
    ``reduced``: per row of ``moves``, whether it carries partial sums (empty: none do).
    ``scratch``: each rank's ``s_chunks``."""

    nchannels: int
    nchunksperloop: int
    finish: float  # when the list schedule that ordered the steps ends, in chunk times
    scratch: np.ndarray
    blocks: np.ndarray
    steps: np.ndarray
    moves: np.ndarray
    waits: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    reduced: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def grid_shape(topology: Topology) -> tuple[tuple[int, ...], bool] | None:
    """(dims, wrap) of a generated mesh or torus whose every neighbour link is there both
    ways and no other (ranks row-major, ``g0`` … in order), else None."""
    meta = topology.meta or {}
    kind, dims = meta.get("generator"), tuple(meta.get("dims") or ())
    if kind not in ("mesh", "torus") or not dims or topology.switches:
        return None
    wrap = kind == "torus"
    n = math.prod(dims)
    if topology.gpus != tuple(f"g{i}" for i in range(n)):
        return None
    expected = 0
    for r in range(n):
        for p in range(len(dims)):
            for step in (1, -1):
                w = neighbour(r, p, step, dims, wrap)
                if w is not None:
                    expected += 1
                    if not topology.has_link(f"g{r}", f"g{w}"):
                        return None
    return (dims, wrap) if len(topology.links) == expected else None


def coords(r: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Rank ``r``'s coordinates, row-major."""
    out = []
    for d in reversed(dims):
        r, c = divmod(r, d)
        out.append(c)
    return tuple(reversed(out))


def neighbour(r: int, p: int, step: int, dims: tuple[int, ...], wrap: bool) -> int | None:
    """The rank one hop from ``r`` along dimension ``p`` in direction ``step`` (±1)."""
    stride = math.prod(dims[p + 1:])
    c = (r // stride) % dims[p]
    nxt = c + step
    if not 0 <= nxt < dims[p]:
        if not wrap:
            return None
        nxt %= dims[p]
    return r + (nxt - c) * stride


def grid_alpha(topology: Topology, chunk_bytes: float) -> float:
    """A link's latency in the time one chunk takes on it (the list schedule's unit)."""
    link = topology.links[0]
    return link.latency_s * link.bandwidth_Bps / chunk_bytes if chunk_bytes else 0.0


def list_order(prio: list[int], link: np.ndarray, cnt: list[int], waits: np.ndarray,
               alpha: float) -> tuple[np.ndarray, float]:
    """When a list schedule starts each transfer (its position among all), and when the
    last arrives: every link (one chunk per time unit, ``alpha`` units to arrive) takes,
    whenever it is free, the ready transfer of lowest ``prio``; a transfer is ready once
    every transfer it waits for (``waits``: (transfer, waited for) rows) has arrived."""
    nt = len(prio)
    waiter, waited = (waits[np.argsort(waits[:, 1], kind="stable")].T if len(waits)
                      else np.zeros((2, 0), dtype=np.int64))
    pending = np.bincount(waiter, minlength=nt).tolist()
    children, bounds = waiter.tolist(), np.searchsorted(waited, np.arange(nt + 1)).tolist()
    nlinks = int(link.max()) + 1 if len(link) else 0
    queues: list[list[tuple[int, int]]] = [[] for _ in range(nlinks)]
    links = link.tolist()
    for i, p in enumerate(pending):
        if not p:
            queues[links[i]].append((prio[i], i))
    for q in queues:
        heapq.heapify(q)
    busy = [False] * nlinks
    started: list[int] = []
    events: list[tuple[float, int, int]] = []  # (time, 0 link free | 1 arrival, which)
    push, pop = heapq.heappush, heapq.heappop
    now = 0.0

    def serve(j: int) -> None:  # link j is free and has a ready transfer: it starts it
        i = pop(queues[j])[1]
        busy[j] = True
        started.append(i)
        push(events, (now + cnt[i], 0, j))
        push(events, (now + cnt[i] + alpha, 1, i))

    for j in range(nlinks):
        if queues[j]:
            serve(j)
    while events:
        now, kind, x = pop(events)
        if kind == 0:
            busy[x] = False
            if queues[x]:
                serve(x)
            continue
        for i in children[bounds[x]:bounds[x + 1]]:
            pending[i] -= 1
            if not pending[i]:
                j = links[i]
                push(queues[j], (prio[i], i))
                if not busy[j]:
                    serve(j)
    position = np.empty(len(prio), dtype=np.int64)
    position[np.array(started, dtype=np.int64)] = np.arange(len(started))
    return position, now


def channels(prio: list[int], link: np.ndarray, cnt: list[int], waits: np.ndarray,
             alpha: float, limits: RuntimeLimits, spread: int = 1
             ) -> tuple[np.ndarray, float, np.ndarray, int] | str:
    """(each transfer's position in the list schedule, when it ends, each transfer's
    channel, the channels) of transfers on links ``link`` (:func:`list_order`), or why
    the runtime has too few channels: a link's transfers dealt in start order
    round-robin to as few channels as hold :data:`PER_CHANNEL` each, and at least
    ``spread`` (as many as it has transfers, within the runtime's channels) (the channels
    of a link run at once, so neighbours in the order stay close in time)."""
    position, finish = list_order(prio, np.unique(link, return_inverse=True)[1], cnt, waits,
                                  alpha)
    nt = len(link)
    by_link, rank = _link_ranks(position, link)
    per_link = np.bincount(link)[link[by_link]]
    chan = np.empty(nt, dtype=np.int64)
    chan[by_link] = rank[by_link] % spread_channels(per_link, spread, limits)
    nchannels = int(chan.max()) + 1 if nt else 1
    if nchannels > limits.max_channels:
        return (f"a link carries {int(np.bincount(link).max())} groups: more than "
                f"{limits.max_channels} channels of {PER_CHANNEL}")
    return position, finish, chan, nchannels


def spread_channels(per_link: np.ndarray, spread: int, limits: RuntimeLimits) -> np.ndarray:
    """Channels of links of ``per_link`` transfers: as few as hold :data:`PER_CHANNEL`
    each, and at least ``spread`` (as many as a link has transfers, within the runtime's)."""
    return np.maximum(-(-per_link // PER_CHANNEL),
                      np.minimum(per_link, min(spread, limits.max_channels)))


def _link_ranks(position: np.ndarray, link: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the transfers by link, then list position; each transfer's rank on its link)."""
    by_link = np.lexsort((position, link))
    rank = np.empty(len(link), dtype=np.int64)
    rank[by_link] = np.arange(len(link)) - np.searchsorted(link[by_link], link[by_link])
    return by_link, rank


def in_turn(position: np.ndarray, link: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each transfer's channel, (opener, transfer it waits for) rows) where each link
    takes its transfers in the list schedule's order: :data:`PER_CHANNEL` at a time per
    channel, channel 0 first, and each channel's first send (its opener) waits until the
    previous channel's last has left. Channels dealt round-robin (:func:`channels`) run
    at once and race for the link, which then serves them as they come, not in the order
    that keeps every link busy."""
    by_link, rank = _link_ranks(position, link)
    chan = rank // PER_CHANNEL
    opens = np.flatnonzero((rank % PER_CHANNEL == 0) & (rank > 0))
    before = np.empty(len(link), dtype=np.int64)
    before[by_link[1:]] = by_link[:-1]
    return chan, np.stack([opens, before[opens]], axis=1)


def grid_moves(topology: Topology, n: int, plan: GridPlan, lt: LinkTiming, what: str
               ) -> Moves:
    """The plan's transfers chunk by chunk on links of timing ``lt``: each group, in the
    plan's order on its link, starts once the link is free and every group its sender
    waits for has arrived (``what``: the stage a deadline reached names)."""
    first, cnt, src, dst, after = plan.moves.T
    needs: list[list[int]] = [[a] if a >= 0 else [] for a in after.tolist()]
    for i, a in plan.waits.tolist():
        needs[i].append(a)
    calls = -(-cnt // lt.capacity)  # occupancies each group holds its link
    occupancy, delay = int(lt.occupancy), int(lt.delay)
    begins, arrive = [0] * len(cnt), [0] * len(cnt)
    free: dict[int, int] = {}  # when each link (sender · n + receiver) is free
    for i, (key, c, need) in enumerate(zip((src * n + dst).tolist(), calls.tolist(), needs,
                                           strict=True)):
        if i % 65536 == 0:
            check(what)
        at = free.get(key, 0)
        for a in need:
            at = max(at, arrive[a])
        begins[i] = at
        free[key] = at + c * occupancy
        arrive[i] = at + (c - 1) * occupancy + delay
    start = np.array(begins, dtype=np.int64)
    each = np.repeat(np.arange(len(cnt)), cnt)
    offset = np.arange(len(each)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    begin = start[each] + (offset // lt.capacity) * lt.occupancy
    names = tuple(node.name for node in topology.nodes)
    position = {name: i for i, name in enumerate(names)}
    index = np.array([position[f"g{v}"] for v in range(n)], dtype=np.int64)
    return Moves(names, first[each] + offset, index[src[each]], index[dst[each]], begin,
                 begin + lt.delay)


def overflow(n: int, limits: RuntimeLimits, block_rank: np.ndarray, step_rank: np.ndarray,
             block_steps: np.ndarray, waited: np.ndarray) -> str:
    """Why the runtime cannot hold a plan's ranks ('' if it can)."""
    blocks = np.bincount(block_rank, minlength=n)
    steps = np.bincount(step_rank, minlength=n)
    elements = 1 + n + blocks + steps
    v = int(np.argmax(elements))
    if elements[v] > limits.max_elements:
        return (f"rank {v} takes {int(steps[v]):,} steps in {int(blocks[v])} thread blocks: "
                f"{int(elements[v]):,} XML elements, more than the {limits.max_elements} the "
                "runtime's reader holds")
    if blocks.max() > limits.max_threadblocks:
        return f"a rank needs {int(blocks.max())} thread blocks, more than the runtime holds"
    if len(waited) and waited.max() >= limits.waitable:
        return (f"a step waits for thread block {int(waited.max())}, past the first "
                f"{limits.waitable} a step can wait for")
    if block_steps.max() > limits.max_steps:
        return f"a thread block takes {int(block_steps.max())} steps, more than {limits.max_steps}"
    return ""
