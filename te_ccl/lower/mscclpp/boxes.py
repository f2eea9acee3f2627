"""An MSCCL++ plan for AllReduce across boxes of NVLink SHARP GPUs: NVLS inside each box,
port channels (IB) between boxes, GPU ``k`` of every box joined to GPU ``k`` of the
others (rails).

``B`` boxes of ``n`` GPUs. GPU ``k`` of each box is the *gateway* of shard ``k`` (a
``1/n`` of the data), which is cut into ``B`` parts, and part ``j`` into ``S`` pieces
of growing then shrinking size (:func:`ramp`).
Part ``j`` of every shard is finished in box ``j``:

* every other box sums its values of the part at the gateway from puts (its ``n−1``
  peers put their value into the gateway's scratch; the gateway adds them, ``re``) and
  the gateway puts that box's partial sum to its twin in box ``j`` over its NIC;
* in box ``j`` the twin adds the partial sums it received to its own value in its
  output, and runs one ``glres`` over the box on the output (every member copied its own
  value there first): the switch adds the ``n`` values and multicasts the total into
  every member's output;
* the twin puts the total back to the other boxes' gateways, which ``gstore`` (multicast)
  it into their boxes' outputs.

Per element a box sends into its GPUs ``n`` units where it finishes the part (the
load-reduce's return and the multicast), ``2(n−1)`` where it only adds (the puts and the
multicast), and every gateway's NIC carries ``2(B−1)/B`` of its shard each way, as a
ring across the rail would. Pieces are pipelined: a piece's partial crosses the NIC
while the next piece is summed; the first and last are the smallest, since the NICs wait
for the first and nothing overlaps the last. Blocks per rank: one per box peer (its puts, the
handshakes), the summing block, two port blocks per other box (partials, totals), the
``glres`` block and the ``gstore`` block; semaphores join them. Every op moves whole
chunks, ``n·B`` times the pieces' sizes a buffer, so one plan serves every size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from te_ccl.baselines.hierarchical import find_boxes
from te_ccl.baselines.ring import ring
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.errors import TecclError
from te_ccl.lower.mscclpp.threadblocks import DATA, MAX_OPS
from te_ccl.lower.mscclpp.to_json import plan_bytes, plan_dict_of
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["BOX_PLAN", "box_allreduce_plan", "box_candidate", "box_shape", "ramp"]

BOX_PLAN = "box-plan"  # the backend named by the box plan's candidate

MAX_SOURCES = 8  # buffers an op reads (the executor's MAX_CHANNEL_PER_OPERATION)


def box_shape(topology: Topology) -> list[list[int]] | None:
    """The boxes, as the plan ranks of each, where the plan applies: two or more boxes
    of equal size, each box's GPUs linked both ways to one NVLS switch; else None."""
    gpus = list(topology.gpus)
    boxes = find_boxes(topology, gpus)
    if len(boxes) < 2 or len({len(b) for b in boxes}) != 1 or len(boxes[0]) < 2:
        return None
    rank = {g: i for i, g in enumerate(gpus)}
    for box in boxes:
        if not any(topology.node(sw).nvls and topology.node(sw).can_reduce
                   and all(topology.has_link(g, sw) and topology.has_link(sw, g) for g in box)
                   for sw in topology.switches):
            return None
    return [[rank[g] for g in box] for box in boxes]


@dataclass(eq=False)
class _Block:
    ctype: str = "none"
    channel: int = -1  # index among the rank's channels of ``ctype``
    remote: int = -1  # index among the rank's remote buffers
    switch: bool = False
    ops: list[dict[str, Any]] = field(default_factory=list)
    data: bool = False
    waited: bool = False
    written: set[tuple[str, int]] = field(default_factory=set)

    def add(self, op: dict[str, Any], reads: tuple[tuple[str, int, int], ...] = (),
            writes: tuple[tuple[str, int, int], ...] = ()) -> None:
        """Append ``op`` with the ``nop`` (``__syncthreads``) the executor needs before it."""
        name = op["name"]
        touched = {(b, i) for b, at, size in (*reads, *writes) for i in range(at, at + size)}
        if ((self.data and name in ("signal", "sem_release"))
                or (self.waited and name in DATA) or (name in DATA and touched & self.written)):
            self.ops.append({"name": "nop"})
            self.data = self.waited = False
            self.written = set()
        self.ops.append(op)
        self.data = self.data or name in DATA
        self.waited = self.waited or name in ("wait", "sem_acquire", "rlxwait")
        self.written |= {(b, i) for b, at, size in writes for i in range(at, at + size)}


class _Rank:
    """One rank's blocks, channels, remote buffers and semaphores."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.blocks: list[_Block] = []
        self.channels: dict[str, list[int]] = {"memory": [], "port": []}
        self.remote: list[tuple[int, str]] = []
        self.sems: dict[tuple[int, int], int] = {}

    def block(self, ctype: str = "none", peer: int = -1, switch: bool = False) -> _Block:
        b = _Block(ctype, switch=switch)
        if peer >= 0:
            b.channel = len(self.channels[ctype])
            self.channels[ctype].append(peer)
            key = (peer, ctype)
            if key not in self.remote:
                self.remote.append(key)
            b.remote = self.remote.index(key)
        self.blocks.append(b)
        return b

    def sem(self, src: _Block, dst: _Block) -> int:
        key = (self.blocks.index(src), self.blocks.index(dst))
        return self.sems.setdefault(key, len(self.sems))

    def release(self, src: _Block, dst: _Block) -> None:
        src.add({"name": "sem_release", "semaphore_ids": [self.sem(src, dst)]})

    def acquire(self, dst: _Block, *srcs: _Block) -> None:
        dst.add({"name": "sem_acquire", "semaphore_ids": [self.sem(s, dst) for s in srcs]})


def _signal(b: _Block, name: str = "signal") -> None:
    b.add({"name": name, "channel_ids": [0], "channel_type": b.ctype})


def _put(b: _Block, src: tuple[str, int, int], dst: tuple[str, int, int]) -> None:
    b.add({"name": "put", "src_buff": [_ref(src)],
           "dst_buff": [{"buffer_id": 0, "index": dst[1], "size": dst[2]}],
           "channel_ids": [0], "channel_type": b.ctype}, reads=(src,))


class _Layout:
    """Chunk and scratch indices (module docstring): a part is ``units`` chunks, piece
    ``s`` its ``sizes[s]`` from ``offset[s]``."""

    def __init__(self, n: int, nboxes: int, sizes: list[int]) -> None:
        self.n, self.B, self.sizes = n, nboxes, sizes
        self.offset = [sum(sizes[:s]) for s in range(len(sizes))]
        self.units = sum(sizes)
        self.chunks = n * nboxes * self.units
        others = (nboxes - 1) * self.units
        self.gather_at, self.partial_at = 0, others * (n - 1)
        self.remote_at = self.partial_at + others
        self.total_at = self.remote_at + others
        self.scratch = self.total_at + others

    def idx(self, shard: int, part: int, piece: int) -> tuple[str, int, int]:
        """The piece of shard ``shard``'s part ``part`` in the input (and output)."""
        return "i", (shard * self.B + part) * self.units + self.offset[piece], self.sizes[piece]

    def other(self, box: int, part: int) -> int:
        """Position of ``part`` among the parts ``box`` does not finish."""
        return part - (part > box)

    def _at(self, base: int, slot: int, piece: int) -> tuple[str, int, int]:
        return "s", base + slot * self.units + self.offset[piece], self.sizes[piece]

    def gathered(self, box: int, part: int, piece: int, sender: int, gateway: int
                 ) -> tuple[str, int, int]:
        """Gateway's scratch for ``sender``'s value of its (non-final) part."""
        m = sender - (sender > gateway)
        return self._at(self.gather_at, self.other(box, part) * (self.n - 1) + m, piece)

    def partial(self, box: int, part: int, piece: int) -> tuple[str, int, int]:
        return self._at(self.partial_at, self.other(box, part), piece)

    def remote(self, box: int, sender_box: int, piece: int) -> tuple[str, int, int]:
        """Where the gateway of the finishing box ``box`` gets ``sender_box``'s partial."""
        return self._at(self.remote_at, self.other(box, sender_box), piece)

    def total(self, box: int, part: int, piece: int) -> tuple[str, int, int]:
        return self._at(self.total_at, self.other(box, part), piece)


def _out(ref: tuple[str, int, int]) -> tuple[str, int, int]:
    """The same range of the output."""
    return "o", ref[1], ref[2]


def _ref(slot: tuple[str, int, int]) -> dict[str, Any]:
    return {"type": slot[0], "index": slot[1], "size": slot[2]}


def _switch(slot: tuple[str, int, int]) -> dict[str, Any]:
    return {"switch_channel_id": 0, "index": slot[1], "size": slot[2]}


def ramp(pieces: int) -> list[int]:
    """Piece sizes, in chunks: doubling to the middle and halving after, so the first
    piece (which the NICs wait for) and the last (which nothing overlaps) are small.

    >>> ramp(8)
    [1, 2, 4, 8, 8, 4, 2, 1]
    """
    half = [1 << i for i in range((pieces + 1) // 2)]
    return half + half[:pieces // 2][::-1]


def _ops_needed(nboxes: int, pieces: int) -> int:
    """The most ops a block of the plan takes, nops included: a lane block (a put to each
    other box's part, a signal, a wait and a release a piece), the ``glres`` block (an
    acquire, two sums and a release to each other box a piece) or the ``gstore`` block
    (an acquire and a store for each other box a piece)."""
    return max(8 + pieces * (nboxes + 4), 2 + pieces * (nboxes + 5),
               3 * (nboxes - 1) * pieces)


def _too_many_sources(boxes: list[list[int]]) -> str | None:
    """Why the plan cannot sum over ``boxes`` (None where it can): a gateway's sums read
    a box's ``n`` values, and the ``B`` boxes' partials, each at most :data:`MAX_SOURCES`."""
    nb, n = len(boxes), len(boxes[0])
    if max(n, nb) <= MAX_SOURCES:
        return None
    return (f"a box AllReduce plan sums up to {MAX_SOURCES} buffers an op; {nb} boxes of "
            f"{n} GPUs need {max(n, nb)}")


def box_allreduce_plan(topology: Topology, *, pieces: int | None = None,
                       name: str | None = None, min_bytes: int = 0, max_bytes: int = 0
                       ) -> bytes:
    """The plan's bytes for AllReduce of every GPU of ``topology``, out of place (module
    docstring), with ``pieces`` per part (None: the most the executor's 64 ops a block
    allow, at most 8), for messages of ``min_bytes`` to ``max_bytes`` (0: no limit).
    Raises :class:`TecclError` where the topology has no equal boxes of NVLS GPUs."""
    boxes = box_shape(topology)
    if boxes is None:
        raise TecclError(f"{topology.name}: a box AllReduce plan needs two or more equal boxes "
                         "whose GPUs share an NVLink SHARP switch")
    too_many = _too_many_sources(boxes)
    if too_many is not None:
        raise TecclError(f"{topology.name}: {too_many}")
    nb, n = len(boxes), len(boxes[0])
    if pieces is None:
        pieces = max((s for s in range(1, 9) if _ops_needed(nb, s) <= MAX_OPS), default=1)
    lay = _Layout(n, nb, ramp(pieces))
    ranks = {r: _Rank(r) for box in boxes for r in box}
    where = {r: (b, k) for b, box in enumerate(boxes) for k, r in enumerate(box)}
    for r, me in ranks.items():
        _build(me, where[r], boxes, lay)
    return plan_bytes(plan_dict_of(
        name or f"{topology.name}-allreduce-boxes", "allreduce", False,
        [_gpu_json(ranks[r], boxes[where[r][0]], lay) for r in sorted(ranks)],
        min_bytes, max_bytes))


def box_candidate(topology: Topology, collective: Collective) -> Schedule | None:
    """The box plan as a candidate of the compile's race (None where it does not apply:
    an out-of-place AllReduce of every GPU, in order, with the Simple protocol, on
    :func:`box_shape`'s boxes within :data:`MAX_SOURCES`). The plan follows no schedule,
    so the candidate stands in with the ring template's, of few transfers (the judge
    lowers a candidate of up to 20,000 at once; the race checks it like any other),
    marked with backend
    :data:`BOX_PLAN`: lowered to an MSCCL++ plan it gives :func:`box_allreduce_plan`,
    and the judge times it by that plan's replay."""
    if collective.kind is not CollectiveKind.ALLREDUCE or collective.inplace \
            or collective.proto != "Simple" \
            or tuple(collective.ranks) != tuple(range(topology.ngpus)):
        return None
    shape = box_shape(topology)
    if shape is None or _too_many_sources(shape) is not None:
        return None
    note = (f"{BOX_PLAN}: the file is the box AllReduce plan, which follows no schedule; "
            "the schedule shown is the ring template's, in its stead")
    schedule = ring(topology, collective)
    return schedule.with_info(backend=BOX_PLAN, notes=(note,) + schedule.info.notes)


def _build(me: _Rank, pos: tuple[int, int], boxes: list[list[int]], lay: _Layout) -> None:
    b, k = pos
    n, nb, pieces = lay.n, lay.B, range(len(lay.sizes))
    box = boxes[b]
    peers = [(m, box[m]) for m in range(n) if m != k]
    lanes = {m: me.block("memory", peer) for m, peer in peers}
    summing = me.block()
    partials = {j: me.block("port", boxes[j][k]) for j in range(nb) if j != b}
    totals = {j: me.block("port", boxes[j][k]) for j in range(nb) if j != b}
    final = me.block(switch=True)
    cast = me.block(switch=True)
    others = [j for j in range(nb) if j != b]
    for m, lane in lanes.items():  # handshake; my value of m's final part into my output
        _signal(lane, "rlxsignal")
        _signal(lane, "rlxwait")
        mine = ("i", lay.idx(m, b, 0)[1], lay.units)
        lane.add({"name": "copy", "src_buff": [_ref(mine)], "dst_buff": [_ref(_out(mine))]},
                 reads=(mine,), writes=(_out(mine),))
        for s in pieces:
            for j in others:  # my value of m's parts other boxes finish, into m's scratch
                _put(lane, lay.idx(m, j, s), lay.gathered(b, j, s, k, m))
            _signal(lane)
            _signal(lane, "wait")  # m's values of my parts (its first: its copy is done)
            me.release(lane, summing)
            if s == 0:
                me.release(lane, final)
    for s in pieces:  # my box's partial of each part another box finishes
        me.acquire(summing, *lanes.values())
        for j in others:
            srcs = (lay.idx(k, j, s), *(lay.gathered(b, j, s, m, k) for m, _ in peers))
            dst = lay.partial(b, j, s)
            summing.add({"name": "re", "src_buff": [_ref(x) for x in srcs],
                         "dst_buff": [_ref(dst)], "reduce_op": "sum"}, reads=srcs, writes=(dst,))
        for j in others:
            me.release(summing, partials[j])
    for j, port in partials.items():  # partials over the NIC; the other boxes' back
        _signal(port, "rlxsignal")
        _signal(port, "rlxwait")
        for s in pieces:
            me.acquire(port, summing)
            _put(port, lay.partial(b, j, s), lay.remote(j, b, s))
            _signal(port)
            _signal(port, "wait")
            me.release(port, final)
    me.acquire(final, *lanes.values())  # every member's value is in its output
    for s in pieces:  # my part: the others' partials added to my value, then the box's
        me.acquire(final, *partials.values())
        mine = lay.idx(k, b, s)
        srcs = (mine, *(lay.remote(b, j, s) for j in others))
        final.add({"name": "re", "src_buff": [_ref(x) for x in srcs],
                   "dst_buff": [_ref(_out(mine))], "reduce_op": "sum"},
                  reads=srcs, writes=(_out(mine),))
        final.add({"name": "glres", "src_buff": [_switch(mine)], "dst_buff": [_switch(mine)],
                   "channel_type": "switch", "reduce_op": "sum"},
                  reads=(_out(mine),), writes=(_out(mine),))
        for j in others:
            me.release(final, totals[j])
    for j, port in totals.items():  # my part's total to the other boxes; theirs to me
        _signal(port, "rlxsignal")
        _signal(port, "rlxwait")
        for s in pieces:
            me.acquire(port, final)
            _put(port, _out(lay.idx(k, b, s)), lay.total(j, b, s))
            _signal(port)
            _signal(port, "wait")
            me.release(port, cast)
    for s in pieces:  # the other boxes' totals of my shard, multicast into my box
        for j in others:
            me.acquire(cast, totals[j])
            total = lay.total(b, j, s)
            cast.add({"name": "gstore", "src_buff": [_ref(total)],
                      "dst_buff": [_switch(lay.idx(k, j, s))], "channel_type": "switch"},
                     reads=(total,))
    for lane in lanes.values():  # done: tell each member; wait for each member's stores
        me.release(final, lane)
        me.release(cast, lane)
    for lane in lanes.values():
        me.acquire(lane, final, cast)
        _signal(lane)
        _signal(lane, "wait")


def _gpu_json(me: _Rank, box: list[int], lay: _Layout) -> dict[str, Any]:
    channels: list[dict[str, Any]] = [{"channel_type": t, "connected_to": peers}
                                      for t, peers in me.channels.items() if peers]
    channels.append({"channel_type": "switch", "buffer_type": "o",
                     "rank_groups": [{"size": len(box), "ranks": list(box)}]})
    blocks = []
    for i, b in enumerate(me.blocks):
        tb_channels: list[dict[str, Any]] = []
        refs: list[dict[str, Any]] = []
        if b.channel >= 0:
            tb_channels.append({"channel_type": b.ctype, "channel_ids": [b.channel]})
            refs.append({"access_channel_type": b.ctype, "remote_buffer_ids": [b.remote]})
        if b.switch:
            tb_channels.append({"channel_type": "switch", "channel_ids": [0]})
        blocks.append({"id": i, "ops": b.ops, "channels": tb_channels,
                       "remote_buffer_refs": refs})
    return {
        "id": me.rank,
        "input_chunks": lay.chunks,
        "output_chunks": lay.chunks,
        "scratch_chunks": lay.scratch,
        "threadblocks": blocks,
        "channels": channels,
        "remote_buffers": [{"rank": r, "type": "s", "access_channel_types": [t]}
                           for r, t in me.remote],
        "semaphores": [{"init_value": 0} for _ in me.sems],
    }
