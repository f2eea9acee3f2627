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
not fit (mesh 16×16: one step per chunk-hop gives its centre rank 4,319 steps; here about
a thousand). Every step moves one group over one link, so the file
is deadlock-free by construction: every thread block takes its transfers in the order of
one key ``(phase, hop, longest way first, group)``, and a step waits only for a receive
of smaller key (:func:`grid_plan`).

The schedule (:func:`solve_grid_alltoall`) has the same transfers chunk by chunk, each
group store-and-forward on its links in key order; the file is timed by its own replay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from te_ccl.backends.scale.moves import Moves
from te_ccl.deadline import check
from te_ccl.model.problem import Problem
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.topology.model import Topology

__all__ = ["GridStep", "GridThreadblock", "GridGpu", "GridPlan", "grid_shape", "grid_plan",
           "grid_hops", "grid_alpha", "solve_grid_alltoall", "METHOD", "GRID_FROM_HOPS"]

METHOD = "grid-alltoall"
PLANNING = "planning the grid AlltoAll"  # what a deadline reached interrupted
GRID_FROM_HOPS = 200_000  # chunk-hops from which a file of one step per chunk and hop takes
#                           the lowering over a minute under load, and (mesh 16×16: 696,320)
#                           its busiest rank no longer fits the reader
PER_CHANNEL = 32  # transfers of a link per channel: a receive adds at most one copy, so a
#                   thread block holds at most 64 steps, and waits for nothing of its own


class GridStep(NamedTuple):
    """One ``<step>`` as the runtime reads it (buffers ``"i"``, ``"o"``, ``"s"``)."""

    op: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: bool


@dataclass(frozen=True)
class GridThreadblock:
    send: int
    recv: int
    chan: int
    steps: tuple[GridStep, ...]


@dataclass(frozen=True)
class GridGpu:
    s_chunks: int
    threadblocks: tuple[GridThreadblock, ...]


@dataclass(frozen=True)
class GridPlan:
    """A whole file (``nchunksperloop`` = ranks × chunks per pair, out of place) and its
    group transfers in key order as parallel arrays: first chunk id, chunks, sender,
    receiver (rank positions), and the transfer whose arrival the sender waits for (−1:
    none)."""

    nchannels: int
    nchunksperloop: int
    finish: float  # when the list schedule that ordered the steps ends, in chunk times
    gpus: tuple[GridGpu, ...]
    first: np.ndarray
    cnt: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    after: np.ndarray


class _Step:
    """A step under construction: its key orders its thread block."""

    __slots__ = ("key", "op", "src", "dst", "cnt", "after", "tb", "index", "hasdep")

    def __init__(self, key: tuple, op: str, src: tuple[str, int], dst: tuple[str, int],
                 cnt: int, after: _Step | None) -> None:
        self.key, self.op, self.src, self.dst, self.cnt, self.after = key, op, src, dst, cnt, after
        self.tb, self.index, self.hasdep = (), -1, False


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
                w = _neighbour(r, p, step, dims, wrap)
                if w is not None:
                    expected += 1
                    if not topology.has_link(f"g{r}", f"g{w}"):
                        return None
    return (dims, wrap) if len(topology.links) == expected else None


def _coords(r: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for d in reversed(dims):
        r, c = divmod(r, d)
        out.append(c)
    return tuple(reversed(out))


def _neighbour(r: int, p: int, step: int, dims: tuple[int, ...], wrap: bool) -> int | None:
    """The rank one hop from ``r`` along dimension ``p`` in direction ``step`` (±1)."""
    stride = math.prod(dims[p + 1:])
    c = (r // stride) % dims[p]
    nxt = c + step
    if not 0 <= nxt < dims[p]:
        if not wrap:
            return None
        nxt %= dims[p]
    return r + (nxt - c) * stride


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


@lru_cache(maxsize=2)
def grid_plan(dims: tuple[int, ...], wrap: bool, k: int, alpha: float = 0.0,
              limits: RuntimeLimits = MSCCL) -> GridPlan | str:
    """The file of the grid AlltoAll with ``k`` chunks per pair, or why none fits
    ``limits`` (an element over ``max_count − 1`` chunks; more channels, thread blocks or
    elements per rank than the runtime holds)."""
    m, n = len(dims), math.prod(dims)
    stride = [math.prod(dims[p + 1:]) for p in range(m)]
    size = [s * k for s in stride]
    if size[0] > limits.max_count - 1:
        return (f"an element of {size[0]} chunks (the ranks behind the slowest dimension "
                f"× {k}) is more than a step carries ({limits.max_count - 1})")
    steps: list[list[_Step]] = [[] for _ in range(n)]
    scratch = [0] * n
    sends: list[tuple[tuple, int, int, _Step, _Step, int]] = []  # key, from, to, s, r, chunk
    # bundles: (holder, source, buffer, offset, first rank, the receive that filled it)
    bundles: list[tuple[int, int, str, int, int, _Step | None]] = [
        (v, v, "i", 0, 0, None) for v in range(n)]
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
                _copy(steps[v], (buf, own), s * k, k, filled)
            for step, elements in _groups(c, d, wrap, (limits.max_count - 1) // e):
                gid += 1
                lo = min(x for x, _ in elements)
                cnt, at, u, ready = len(elements) * e, (buf, off + lo * e), v, filled
                chunk = (s * n + rank0 + lo * stride[p]) * k  # the group's first chunk id
                far = elements[-1][1]
                for hop in range(1, far + 1):
                    w = _neighbour(u, p, step, dims, wrap)
                    key = (hop - far, gid)  # the list schedule's priority
                    got = scratch[w]
                    scratch[w] += cnt
                    send = _Step(key, "s", at, ("s", got), cnt, ready)
                    recv = _Step(key, "r", at, ("s", got), cnt, None)
                    steps[u].append(send)
                    steps[w].append(recv)
                    sends.append((key, u, w, send, recv, chunk))
                    at, u, ready = ("s", got), w, recv
                    if elements[0][1] == hop:  # w keeps its element
                        x = elements.pop(0)[0]
                        kept = got if step == 1 else got + cnt - e
                        if step == 1:
                            at, chunk = ("s", got + e), chunk + e
                        cnt -= e
                        if last:
                            _copy(steps[w], ("s", kept), s * k, k, recv)
                        else:
                            following.append((w, s, "s", kept, rank0 + x * stride[p], recv))
                    if not elements:
                        break
        bundles = following
    return _assemble(n, k, steps, scratch, sends, limits, alpha)


def _copy(steps: list[_Step], src: tuple[str, int], out: int, k: int,
          after: _Step | None) -> None:
    """A copy into the output, right after the receive that brought ``src`` (its key)."""
    steps.append(_Step((), "cpy", src, ("o", out), k, after))


def _order(sends: list[tuple[tuple, int, int, _Step, _Step, int]], alpha: float) -> float:
    """Sort ``sends`` by when a list schedule starts them and key their steps so: every
    link (one chunk per time unit, ``alpha`` units to arrive) takes, whenever it is free,
    the ready group with the most hops left in its phase (then the first made). A group
    is ready once the receive its sender waits for has arrived. Returns when the last
    group arrives."""
    import heapq

    index = {id(x[4]): i for i, x in enumerate(sends)}
    children: list[list[int]] = [[] for _ in sends]
    links: dict[tuple[int, int], int] = {}
    link = [links.setdefault((u, w), len(links)) for _, u, w, _, _, _ in sends]
    queues: list[list[tuple[tuple, int]]] = [[] for _ in links]
    events: list[tuple[float, int, int]] = []  # (time, 0 link free | 1 arrival, id)
    for i, (key, _, _, send, _, _) in enumerate(sends):
        if send.after is None:
            queues[link[i]].append((key, i))
        else:
            children[index[id(send.after)]].append(i)
    for q in queues:
        heapq.heapify(q)
    busy = [False] * len(links)
    started: list[int] = []

    def serve(j: int, now: float) -> None:
        if busy[j] or not queues[j]:
            return
        _, i = heapq.heappop(queues[j])
        busy[j] = True
        started.append(i)
        cnt = sends[i][3].cnt
        heapq.heappush(events, (now + cnt, 0, j))
        heapq.heappush(events, (now + cnt + alpha, 1, i))

    for j in range(len(links)):
        serve(j, 0.0)
    while events:
        now, kind, x = heapq.heappop(events)
        if kind == 0:
            busy[x] = False
            serve(x, now)
        else:
            for i in children[x]:
                heapq.heappush(queues[link[i]], (sends[i][0], i))
                serve(link[i], now)
    sends[:] = [sends[i] for i in started]
    for n, (_, _, _, send, recv, _) in enumerate(sends):
        send.key = recv.key = (n,)
    return now if sends else 0.0


def _assemble(n: int, k: int, steps: list[list[_Step]], scratch: list[int],
              sends: list[tuple[tuple, int, int, _Step, _Step, int]],
              limits: RuntimeLimits, alpha: float) -> GridPlan | str:
    """Channels per link (:data:`PER_CHANNEL` transfers each, in key order), thread blocks,
    step order and dependencies; or why the runtime cannot hold it."""
    finish = _order(sends, alpha)
    on_link: dict[tuple[int, int], int] = {}
    for _, u, w, send, recv, _ in sends:
        chan = on_link.get((u, w), 0) // PER_CHANNEL
        on_link[(u, w)] = on_link.get((u, w), 0) + 1
        send.tb, recv.tb = (1, w, chan), (0, u, chan)  # receiving blocks first: waited for
    nchannels = 1 + max(((x - 1) // PER_CHANNEL for x in on_link.values()), default=0)
    if nchannels > limits.max_channels:
        return (f"a link carries {max(on_link.values())} groups: more than "
                f"{limits.max_channels} channels of {PER_CHANNEL}")
    gpus = []
    for v in range(n):
        check(PLANNING)
        blocks: dict[tuple, list[_Step]] = {}
        for st in steps[v]:
            if st.op == "cpy":  # right after the receive that brought its chunks
                st.key, st.tb = ((st.after.key + (1,), st.after.tb) if st.after is not None
                                 else ((-1,), (2, -1, 0)))
        for st in sorted(steps[v], key=lambda x: x.key):
            blocks.setdefault(st.tb, []).append(st)
        order = sorted(blocks)
        ids = {tb: i for i, tb in enumerate(order)}
        for tb in order:
            for i, st in enumerate(blocks[tb]):
                st.index = i
        elements = 1 + n + len(order) + len(steps[v])
        if elements > limits.max_elements:
            return (f"rank {v} takes {len(steps[v]):,} steps in {len(order)} thread blocks: "
                    f"{elements:,} XML elements, more than the {limits.max_elements} the "
                    "runtime's reader holds")
        waited = sum(1 for tb in order if tb[0] == 0)
        if len(order) > limits.max_threadblocks or waited > limits.waitable or max(
                len(b) for b in blocks.values()) > limits.max_steps:
            return (f"rank {v} needs {len(order)} thread blocks of up to "
                    f"{max(len(b) for b in blocks.values())} steps: more than the runtime holds")
        for st in steps[v]:
            dep = st.after
            if dep is not None and not (dep.tb == st.tb and dep.index < st.index):
                dep.hasdep = True
        gpus.append((blocks, order, ids))
    built = []
    for v, (blocks, order, ids) in enumerate(gpus):
        threadblocks = []
        for tb in order:
            out = []
            for st in blocks[tb]:
                dep = st.after
                far = dep is not None and not (dep.tb == st.tb and dep.index < st.index)
                out.append(GridStep(st.op, st.src[0], st.src[1], st.dst[0], st.dst[1], st.cnt,
                                    ids[dep.tb] if far else -1, dep.index if far else -1,
                                    st.hasdep))
            kind, peer, chan = tb
            threadblocks.append(GridThreadblock(peer if kind == 1 else -1,
                                                peer if kind == 0 else -1, chan, tuple(out)))
        built.append(GridGpu(scratch[v], tuple(threadblocks)))
    receipt = {id(x[4]): i for i, x in enumerate(sends)}
    cols = np.array([(x[5], x[3].cnt, x[1], x[2], receipt.get(id(x[3].after), -1))
                     for x in sends], dtype=np.int64).reshape(-1, 5).T
    return GridPlan(nchannels, n * k, finish, tuple(built), *cols)


def grid_hops(dims: tuple[int, ...], wrap: bool) -> int:
    """Links crossed by one chunk per ordered pair of ranks on shortest paths, by
    arithmetic: a coordinate pair of dimension ``p`` recurs ``(n / d_p)²`` times.

    >>> grid_hops((2, 2), False), grid_hops((16, 16), True)
    (16, 524288)
    """
    n = math.prod(dims)
    line = [(d ** 3 - d) // 3 if not wrap else d * (d * d // 4) for d in dims]
    return sum((n // d) ** 2 * s for d, s in zip(dims, line, strict=True))


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
    if shape is None or any(len(dm.sources) != 1 or len(dm.destinations) != 1
                            for dm in problem.demands):
        return None
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
    lt = next(iter(timings.values()))
    calls = -(-plan.cnt // lt.capacity)  # epochs of occupancy each group holds its link
    start = np.zeros(len(plan.cnt), dtype=np.int64)
    arrive = np.zeros(len(plan.cnt), dtype=np.int64)
    free: dict[tuple[int, int], int] = {}
    for i, (u, w, after, c) in enumerate(zip(plan.src.tolist(), plan.dst.tolist(),
                                             plan.after.tolist(), calls.tolist(), strict=True)):
        if i % 65536 == 0:
            check(PLANNING)
        t = max(free.get((u, w), 0), int(arrive[after]) if after >= 0 else 0)
        start[i] = t
        free[(u, w)] = t + c * lt.occupancy
        arrive[i] = t + (c - 1) * lt.occupancy + lt.delay
    each = np.repeat(np.arange(len(plan.cnt)), plan.cnt)
    offset = np.arange(len(each)) - np.repeat(np.cumsum(plan.cnt) - plan.cnt, plan.cnt)
    begin = start[each] + (offset // lt.capacity) * lt.occupancy
    names = tuple(node.name for node in topology.nodes)
    index = np.array([names.index(f"g{v}") for v in range(n)], dtype=np.int64)
    moves = Moves(names, plan.first[each] + offset, index[plan.src[each]],
                  index[plan.dst[each]], begin, begin + lt.delay)
    notes = (f"grid AlltoAll: dimension by dimension, slowest first, {len(plan.cnt):,} "
             f"groups of up to {int(plan.cnt.max())} chunks relayed in one step each, on "
             f"{plan.nchannels} channel(s)",)
    return moves, notes


def grid_alpha(topology: Topology, chunk_bytes: float) -> float:
    """A link's latency in the time one chunk takes on it (the list schedule's unit)."""
    link = topology.links[0]
    return link.latency_s * link.bandwidth_Bps / chunk_bytes if chunk_bytes else 0.0
