"""Pass 3: steps into thread blocks, with the syncs the executor needs between them.

* **Lanes.** The batches between two GPUs go, in signal order, to *lanes*: a lane is one
  channel on each side (a memory channel within a box, a port channel, served by the
  host proxy, between boxes) (the k-th channel a rank declares to a peer pairs with the
  peer's k-th channel to it) and one thread block on each side. A batch joins the first
  lane where it is needed no earlier than the lane's previous batch that way and no
  block passes a budget of operations; the largest budget whose blocks all fit the
  executor's 64 operations wins (fewest blocks: they must all be resident).
* **Merged puts.** Consecutive puts of one block to one peer buffer whose source and
  destination chunks both continue the previous put's become one put of more chunks.
* **Waits in signal order.** On a lane, the n-th wait is released by the n-th signal, so
  a receiver that needs a later batch first waits for the earlier ones: each wait moves
  to the earliest key a later batch of its lane is needed at.
* **Other blocks.** ``glres`` and its contributions of the reducer run in a switch block;
  copies whose inputs are the rank's own data in a local block; every other local step
  joins the block of the step that made its input.
* **Semaphores.** A step that reads what another block of its GPU made acquires a
  semaphore the other block releases after making it; one semaphore per ordered pair of
  blocks, counted, so a step acquires every release up to the one it needs.
* **nop.** The executor's ``nop`` is ``__syncthreads``: one goes between a data op and a
  later signal or release, between a wait or acquire and a later data op, and between
  two data ops where the second touches a slot the first wrote.
* **Handshake.** A rank writes into a peer's buffers only once the peer has entered the
  same run. A lane whose two blocks each wait for the other's signal before their first
  put has that already (any signal says its sender has entered); every other lane block
  starts with a relaxed signal and wait.
* **Load-reduces in parts.** A block's ``glres`` ops run one after another, and each
  ends with the stores of its last pieces, which nothing of the block overlaps. Where a
  plan has load-reduces its chunk counts are in parts (up to :data:`SPLIT_PARTS`), every
  op covering its chunk's parts, and: a block running at least :data:`SPLIT_FROM` cuts its
  last into halves of what is left (:func:`tail_cuts`: the final drain is one part's);
  a block running fewer cuts each into equal ops, :data:`SPLIT_OPS` in all at most
  (:func:`even_cuts`: one op a rank, as on gb200-nvl72, drains a 16th of it). By plan
  replay, AllReduce 1 GB: dgx-h100 at 8 chunks a rank (the last cut in halves) and
  gb200-nvl72 at one (cut in 16) end closest to the NVLS bound of the cuts tried; a cut
  op adds a round trip, so smaller chunks are cut in fewer parts (:func:`split_parts`:
  dgx-h100 at 16, 64 and 256 MB, 1, 2 and 8 parts, the best of 1 to 32 there).

Every blocking op waits for something done at a smaller key (pass 2), so running all
blocks in key order never blocks: the plan is free of deadlock by construction.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from te_ccl.baselines.hierarchical import find_boxes
from te_ccl.deadline import check
from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.mscclpp.program import Batch, Program, Slot, Step
from te_ccl.schedule import Schedule

__all__ = ["DATA", "MAX_OPS", "MAX_CHANNELS", "Block", "GpuPlan", "assign_blocks",
           "plan_blocks", "split_parts"]

MAX_OPS = 64  # operations per thread block (the executor's MAX_OPERATION)
MAX_CHANNELS = 16  # channels and remote buffers per thread block (MAX_CHANNEL)
MAX_SEMAPHORE_IDS = 16  # semaphores one op acquires or releases (MAX_DEVICE_SEMAPHORES)
DATA = {"put", "copy", "re", "glres", "gstore"}
SPLIT_PARTS = 32  # parts of a chunk, at most, where a plan's load-reduces are cut
SPLIT_FROM = 4  # load-reduces a block runs, at least, for only its last to be cut
SPLIT_OPS = 16  # ops the load-reduces of a block running fewer are cut into, at most


@dataclass(eq=False)
class Block:
    gpu: int
    peer: int = -1  # lane blocks: the channel's peer
    lane: int = -1
    ctype: str = "memory"  # the lane's channel: "port" between boxes (through the proxy)
    steps: list[Step] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    channel: int = -1  # the channel's index among the GPU's channels of its type
    switch: list[tuple[tuple[int, ...], str]] = field(default_factory=list)  # (group, buffer)
    remote: list[tuple[int, str, str]] = field(default_factory=list)  # (rank, buffer, type)
    handshake: bool = False  # starts with a relaxed signal and wait (module docstring)


@dataclass
class GpuPlan:
    """One rank's blocks and what they declare."""

    gpu: int
    blocks: list[Block]
    channels: dict[str, list[int]]  # per channel type, the peer of each, in index order
    groups: list[tuple[tuple[int, ...], str]]  # NVLS (group, buffer) of this rank, in order
    remote: list[tuple[int, str, str]]  # remote buffers (rank, buffer, channel type), by id
    semaphores: int
    parts: int = 1  # parts of a chunk the plan's chunk counts and indices are in


BUDGETS = (512, 256, 160, 112, 80, 56, 40, 28, 20, 14, 10)  # ops a lane may plan for


def split_parts(chunk_s: float, alpha_s: float) -> int:
    """The parts a chunk is cut into for its load-reduces: the most, a power of two up to
    :data:`SPLIT_PARTS`, whose part still takes a link at least its ``α`` (``chunk_s``:
    a chunk's time on the GPU's link into the NVLS switch). A cut op pays a round trip
    and saves the drain of what it cuts off, so small chunks are not cut.

    >>> split_parts(34.7e-6, 0.7e-6), split_parts(2.2e-6, 0.7e-6), split_parts(0.5e-6, 0.7e-6)
    (32, 2, 1)
    """
    parts = 1
    while parts < SPLIT_PARTS and chunk_s / (2 * parts) >= alpha_s:
        parts *= 2
    return parts


def plan_blocks(schedule: Schedule, program: Program) -> list[GpuPlan]:
    """The blocks of every rank of ``schedule``'s ``program`` (:func:`assign_blocks`): its
    ranks' boxes (``find_boxes``: memory channels within one, port channels between) and,
    where GPUs link into NVLS switches, the parts a chunk is cut into for its
    load-reduces, by the slowest such link and its largest ``α`` (:func:`split_parts`)."""
    topo = schedule.topology
    gpus = [topo.gpu(r) for r in schedule.collective.ranks]
    box = {g: i for i, members in enumerate(find_boxes(topo, gpus)) for g in members}
    into = [x for g in gpus for x in topo.out_links(g) if topo.node(x.dst).nvls]
    parts = split_parts(schedule.chunk_bytes / min(x.bandwidth_Bps for x in into),
                        max(x.latency_s for x in into)) if into else 1
    return assign_blocks(program, [box[g] for g in gpus], parts)


def assign_blocks(program: Program, box: list[int], parts: int = 1) -> list[GpuPlan]:
    """The blocks of every rank, with the largest lane budget whose blocks all fit;
    ``box[r]``: rank ``r``'s box (CUDA IPC reaches within one, port channels between);
    ``parts``: where the plan has load-reduces, the parts its chunks are cut into
    (:func:`split_parts`)."""
    lo, hi, best, worst = 0, len(BUDGETS) - 1, None, 0  # fitting grows as budgets shrink
    while lo <= hi:
        mid = (lo + hi) // 2
        plans = _assign(program, BUDGETS[mid], box, parts)
        most = max((len(b.ops) for p in plans for b in p.blocks), default=0)
        if most <= MAX_OPS:
            best, hi = plans, mid - 1
        else:
            worst, lo = most, mid + 1
    if best is not None:
        return best
    raise RuntimeLimitError(f"a thread block needs {worst} operations; the MSCCL++ "
                            f"executor holds {MAX_OPS} (too many steps on one rank "
                            "outside its channels; try fewer chunks)")


def _assign(program: Program, budget: int, box: list[int], parts: int) -> list[GpuPlan]:
    lane_of = _lanes(program.batches, budget)
    blocks: dict[int, dict[Any, Block]] = defaultdict(dict)
    for b in program.batches:
        lane = lane_of[id(b)]
        ctype = "memory" if box[b.gpu] == box[b.peer] else "port"
        for gpu, peer in ((b.gpu, b.peer), (b.peer, b.gpu)):
            blocks[gpu].setdefault((peer, lane), Block(gpu, peer, lane, ctype))
    _order_waits(program.batches, lane_of)
    where: dict[int, Block] = {}
    for gpu in range(program.nranks):
        check("lowering to an MSCCL++ plan")
        for s in sorted(program.steps.get(gpu, []), key=_key):
            where[id(s)] = _home(s, where, blocks[gpu], lane_of)
            where[id(s)].steps.append(s)
    groups = sorted({(ev.group, slot.buf) for ev in program.events for slot in (ev.x, ev.y)})
    most = max((sum(s.name == "glres" for s in steps) for steps in program.steps.values()),
               default=0)
    parts = parts if most else 1
    for gpu in range(program.nranks):
        for b in blocks[gpu].values():
            if b.peer >= 0:
                partner = blocks[b.peer][(gpu, b.lane)]
                b.handshake = not (_waits_first(b) and _waits_first(partner))
    return [_gpu_plan(gpu, blocks[gpu], where, groups, parts) for gpu in range(program.nranks)]


def _waits_first(block: Block) -> bool:
    """Does every put of ``block`` come after one of its waits?"""
    for s in sorted(block.steps, key=_key):
        if s.name == "wait":
            return True
        if s.name == "put":
            return False
    return True


def _key(s: Step) -> tuple:
    return (s.key, s.seq)


def _lanes(batches: list[Batch], budget: int) -> dict[int, int]:
    """Batch → lane: per pair of ranks, in signal order, the first lane where neither
    side's block would pass ``budget`` ops (a put per run of contiguous items, a signal;
    a wait, and a reduction, a nop and a semaphore op per item received) and the batch is
    needed no earlier than the lane's last batch in its direction (else its wait would
    have to wait for a batch needed later: a false dependency); else a new lane."""
    pairs: dict[tuple[int, int], list[Batch]] = defaultdict(list)
    for b in batches:
        pairs[(min(b.gpu, b.peer), max(b.gpu, b.peer))].append(b)
    lane_of: dict[int, int] = {}
    for pair_batches in pairs.values():
        used: list[dict[int, int]] = []
        last: list[dict[int, tuple[int, ...]]] = []  # per lane: sender → last need
        for b in sorted(pair_batches, key=lambda b: _key(b.signal)):
            send, recv = _runs(b.items) + 2, 2 + 3 * len(b.items)
            lane = next((i for i in range(len(used))
                         if used[i].get(b.gpu, 0) + send <= budget
                         and used[i].get(b.peer, 0) + recv <= budget
                         and last[i].get(b.gpu, b.need) <= b.need), len(used))
            if lane == len(used):
                used.append({})
                last.append({})
            used[lane][b.gpu] = used[lane].get(b.gpu, 0) + send
            used[lane][b.peer] = used[lane].get(b.peer, 0) + recv
            last[lane][b.gpu] = b.need
            lane_of[id(b)] = lane
    return lane_of


def _runs(items: list[Step]) -> int:
    """How many puts ``items`` become once contiguous ones merge."""
    runs, last = 0, None
    for s in sorted(items, key=_key):
        if not (last and s.name == last.name == "put" and _continues(last, s)):
            runs += 1
        last = s
    return runs


def _continues(a: Step, b: Step) -> bool:
    """Put ``b`` writes the chunk after ``a``'s from the chunk after ``a``'s."""
    return (a.src[0].buf == b.src[0].buf and a.dst[0].buf == b.dst[0].buf
            and a.src[0].index + 1 == b.src[0].index and a.dst[0].index + 1 == b.dst[0].index)


def _order_waits(batches: list[Batch], lane_of: dict[int, int]) -> None:
    """Waits of one lane and direction in signal order (see the module docstring)."""
    runs: dict[tuple[int, int, int], list[Batch]] = defaultdict(list)
    for b in batches:
        runs[(b.gpu, b.peer, lane_of[id(b)])].append(b)
    for run in runs.values():
        run.sort(key=lambda b: _key(b.signal))
        earliest = None
        for b in reversed(run):
            if earliest is None or (b.need, b.signal.seq) < earliest:
                earliest = (b.need, b.signal.seq)
            b.wait.key, b.wait.seq = earliest


def _home(s: Step, where: dict[int, Block], mine: dict[Any, Block],
          lane_of: dict[int, int]) -> Block:
    """The block step ``s`` runs in."""
    if s.batch is not None:
        b = s.batch
        peer = b.peer if s.gpu == b.gpu else b.gpu
        return mine[(peer, lane_of[id(b)])]
    if s.event is not None:  # glres, and the reducer's own contribution
        return mine.setdefault("switch", Block(s.gpu))
    if s.anchor is not None:
        return where[id(s.anchor)]
    return mine.setdefault("local", Block(s.gpu))


def _gpu_plan(gpu: int, mine: dict[Any, Block], where: dict[int, Block],
              groups: list[tuple[tuple[int, ...], str]], parts: int) -> GpuPlan:
    lanes = sorted(k for k in mine if isinstance(k, tuple))
    blocks = [mine[k] for k in lanes] + [mine[k] for k in ("switch", "local") if k in mine]
    channels: dict[str, list[int]] = {"memory": [], "port": []}
    for k in lanes:
        b = mine[k]
        b.channel = len(channels[b.ctype])
        channels[b.ctype].append(b.peer)
    remote: list[tuple[int, str, str]] = []
    semaphores = _emit(blocks, where, remote, parts)
    member = [g for g in groups if gpu in g[0]]
    for b in blocks:
        if len(b.remote) > MAX_CHANNELS or len(b.switch) > MAX_CHANNELS:
            raise RuntimeLimitError(f"rank {gpu}: a thread block uses more than "
                                    f"{MAX_CHANNELS} remote buffers or NVLS groups")
    return GpuPlan(gpu, blocks, channels, member, remote, semaphores, parts)


def _emit(blocks: list[Block], where: dict[int, Block], remote: list[tuple[int, str, str]],
          parts: int) -> int:
    """Every block's ops; returns how many semaphores the rank declares."""
    index = {id(b): i for i, b in enumerate(blocks)}
    sems: dict[tuple[int, int], int] = {}
    released: dict[tuple[int, int], list[int]] = defaultdict(list)  # producer steps, in order
    needs: dict[int, set[int]] = defaultdict(set)  # producer step → consumer blocks
    for b in blocks:
        for s in b.steps:
            for p in s.after:
                a = where[id(p)]
                if a is not b:
                    needs[id(p)].add(index[id(b)])
    for b in blocks:  # release order: the producer block's step order
        for s in b.steps:
            for c in sorted(needs.get(id(s), ())):
                pair = (index[id(b)], c)
                sems.setdefault(pair, len(sems))
                released[pair].append(id(s))
    order = {pair: {s: i for i, s in enumerate(steps, 1)} for pair, steps in released.items()}
    acquired: dict[tuple[int, int], int] = defaultdict(int)
    for b in blocks:
        me = index[id(b)]
        ops = _Ops(b, parts)
        if b.handshake:
            ops.add({"name": "rlxsignal", "channel_ids": [0], "channel_type": b.ctype})
            ops.add({"name": "rlxwait", "channel_ids": [0], "channel_type": b.ctype})
        for s in b.steps:
            ids: list[int] = []
            for p in s.after:
                a = index[id(where[id(p)])]
                if a == me:
                    continue
                pair = (a, me)
                need = order[pair][id(p)]
                if need > acquired[pair]:
                    ids += [sems[pair]] * (need - acquired[pair])
                    acquired[pair] = need
            for i in range(0, len(ids), MAX_SEMAPHORE_IDS):
                ops.add({"name": "sem_acquire", "semaphore_ids": ids[i:i + MAX_SEMAPHORE_IDS]})
            ops.step(s, remote)
            out = [sems[(me, c)] for c in sorted(needs.get(id(s), ()))]
            for i in range(0, len(out), MAX_SEMAPHORE_IDS):
                ops.add({"name": "sem_release", "semaphore_ids": out[i:i + MAX_SEMAPHORE_IDS]})
    return len(sems)


class _Ops:
    """One block's op list, with the ``nop`` steps the module docstring asks for."""

    def __init__(self, block: Block, parts: int) -> None:
        self.block = block
        self.parts = parts
        loads = [s for s in block.steps if s.name == "glres"]
        self.cuts = {id(s): [(0, parts)] for s in loads}
        if len(loads) >= SPLIT_FROM:
            self.cuts[id(loads[-1])] = tail_cuts(parts)
        elif loads:
            self.cuts = {id(s): even_cuts(parts, SPLIT_OPS // len(loads)) for s in loads}
        self.last: dict[str, Any] | None = None
        self.last_put: Step | None = None  # the put step ``last`` ends with, if a put
        self.written: set[Slot] = set()
        self.data = self.waited = False  # a data op, a wait or acquire since the last nop

    def add(self, op: dict[str, Any], reads: tuple[Slot, ...] = (),
            writes: tuple[Slot, ...] = ()) -> None:
        last = self.last["name"] if self.last else "nop"
        name = op["name"]
        if ((self.data and name in ("signal", "sem_release"))
                or (self.waited and name in DATA)
                or (last in DATA and name in DATA
                    and any(x in self.written for x in (*reads, *writes)))):
            self.block.ops.append({"name": "nop"})
            self.written = set()
            self.data = self.waited = False
        self.block.ops.append(op)
        self.last = op
        self.written.update(writes)
        self.data = self.data or name in DATA
        self.waited = self.waited or name in ("wait", "sem_acquire", "rlxwait")

    def step(self, s: Step, remote: list[tuple[int, str, str]]) -> None:
        b = self.block
        if s.name in ("signal", "wait"):
            self.add({"name": s.name, "channel_ids": [0], "channel_type": b.ctype})
        elif s.name == "put":
            buf = _remote_id(b, remote, s.peer, s.dst[0].buf)
            last = self.last
            if (last is not None and last["name"] == "put" and self.last_put is not None
                    and last["dst_buff"][0]["buffer_id"] == buf
                    and _continues(self.last_put, s)):
                last["src_buff"][0]["size"] += self.parts
                last["dst_buff"][0]["size"] += self.parts
                self.last_put = s
                return
            self.last_put = s
            self.add({"name": "put", "src_buff": [self.local(s.src[0])],
                      "dst_buff": [{"buffer_id": buf, "index": s.dst[0].index * self.parts,
                                    "size": self.parts}],
                      "channel_ids": [0], "channel_type": b.ctype}, reads=s.src)
        elif s.name == "glres":
            for j, (at, size) in enumerate(self.cuts[id(s)]):  # parts of one chunk: no nop between
                src, dst = (self.switch(s.event.group, x, at, size) for x in (s.src[0], s.dst[0]))
                self.add({"name": "glres", "src_buff": [src], "dst_buff": [dst],
                          "channel_type": "switch", "reduce_op": "sum"},
                         reads=s.src if j == 0 else (), writes=s.dst if j == 0 else ())
        elif s.name == "gstore":
            self.add({"name": "gstore", "src_buff": [self.local(s.src[0])],
                      "dst_buff": [self.switch(s.event.group, s.dst[0])],
                      "channel_type": "switch"}, reads=s.src, writes=s.dst)
        else:  # re, copy
            op = {"name": s.name, "src_buff": [self.local(x) for x in s.src],
                  "dst_buff": [self.local(x) for x in s.dst]}
            if s.name == "re":
                op["reduce_op"] = "sum"
            self.add(op, reads=s.src, writes=s.dst)


    def switch(self, group: tuple[int, ...], slot: Slot, at: int = 0, size: int | None = None
               ) -> dict[str, Any]:
        """A reference through the block's switch channel of ``group`` on ``slot``'s buffer
        (declared on the block once): the whole chunk, or ``size`` of its parts from ``at``."""
        key = (group, slot.buf)
        if key not in self.block.switch:
            self.block.switch.append(key)
        return {"switch_channel_id": self.block.switch.index(key),
                "index": slot.index * self.parts + at, "size": size or self.parts}

    def local(self, slot: Slot) -> dict[str, Any]:
        return {"type": slot.buf, "index": slot.index * self.parts, "size": self.parts}


def tail_cuts(parts: int) -> list[tuple[int, int]]:
    """``(first part, parts)`` of each op the last load-reduce is cut into: halves, each
    the half of what is left, and the last part: the drain after the final op is that of
    one part, and only ``log2(parts) + 1`` ops pay a start.

    >>> tail_cuts(16)
    [(0, 8), (8, 4), (12, 2), (14, 1), (15, 1)]
    """
    cuts, at = [], 0
    while parts - at > 1:
        size = (parts - at) // 2
        cuts.append((at, size))
        at += size
    return cuts + [(at, 1)]


def even_cuts(parts: int, most: int) -> list[tuple[int, int]]:
    """``(first part, parts)`` of the equal ops a load-reduce is cut into: the largest
    power of two of them up to ``most`` that divides ``parts``.

    >>> even_cuts(32, 5)
    [(0, 8), (8, 8), (16, 8), (24, 8)]
    """
    ops = 1
    while ops * 2 <= most and parts % (ops * 2) == 0:
        ops *= 2
    return [(i * (parts // ops), parts // ops) for i in range(ops)]


def _remote_id(block: Block, remote: list[tuple[int, str, str]], rank: int, buf: str) -> int:
    """The block's index of rank ``rank``'s buffer ``buf`` among its remote buffers of its
    channel type (declared on the GPU once)."""
    key = (rank, buf, block.ctype)
    if key not in remote:
        remote.append(key)
    if key not in block.remote:
        block.remote.append(key)
    return block.remote.index(key)
