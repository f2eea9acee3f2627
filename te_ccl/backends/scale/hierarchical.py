"""AllGather on boxes of GPUs behind a switch, joined by rails or direct links: cross, then spread.

Topology (``boxes`` / ``rail_optimized`` generators): box ``a`` holds GPUs ``b{a}.*`` on a
box switch ``b{a}.sw`` (an NVSwitch, linked both ways to each of them); boxes are joined
by *ports* ``u → [w →] v``: a GPU ``u`` of one box to a GPU ``v`` of another, directly or
through one switch ``w`` outside the boxes (a rail switch, which forwards but need not copy).

Bound. Each box must take in every foreign chunk once through its ports' entry links, and
each GPU every chunk through its in-links; the cut bound is the larger (on rail8x8 the
box: 56 foreign chunks through 8 NICs of 50 GB/s; on dgx2x2 the GPUs without a NIC).

Schedule (after the hierarchical NCCL algorithms, pipelined per sub-chunk):

1. *cross*: each foreign box receives every chunk exactly once, through one port. The
   chunks of box ``a`` are dealt to the ports towards box ``c`` in proportion (chunk of
   GPU ``j`` → rail ``j`` on rail-optimized clusters; on dgx2x2 the chunk of an odd GPU
   leaves through its even neighbour's NIC once the spread of step 2 brought it there).
   Each exit link sends its own chunks first, destination boxes rotating, so on a rail
   every slot is a box permutation and the buffer-less rail switch never sees two chunks
   for one out-link;
2. *spread*: inside every box each chunk goes from its root (its source, or the port's
   entry GPU) to the others through the box switch — one multicast when the problem
   lets the switch copy, else unicasts: the mate a relay waits for first, then the mate
   owed most chunks, then the next offset (a permutation when all GPUs of a box spread
   at once). Where a root would send more than the busiest in-link takes (dgx2x2: the
   NIC GPUs root three times as many chunks), every GPU that got a chunk forwards it
   too. Chunks are served in the order they became ready. A switch that may not copy
   passes a chunk once per epoch (played backwards, two partials would meet in it).

Both steps are list-scheduled epoch by epoch on per-link calendars (occupancy, capacity
and delay from the problem's timings), so every placed transfer respects the link rules.
Every GPU receives each chunk once, so the reversed fan-out behind ReduceScatter /
AllReduce is a tree (then the box switch copies only if it can reduce).

An AllReduce on boxes whose switches add and multicast (NVLink SHARP, FRED), joined slot
to slot, is summed in the switches instead (:func:`solve_in_switch_allreduce`).

Sub-chunks (:func:`hierarchical_subchunks`): the fewest that bring fill and drain under
OVERHEAD of the time — 1 at 1 KB (α-bound: fewest hops), a few dozen at 1 GB — and few
enough that the lowered MSCCL algorithm stays within the runtime reader's element limit.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from te_ccl.backends.scale.moves import Moves
from te_ccl.backends.scale.msccl_budget import max_subchunks
from te_ccl.backends.scale.torus import chunks_by_source
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import check
from te_ccl.errors import SolverError
from te_ccl.model.problem import Problem, make_problem
from te_ccl.schedule import Transfer
from te_ccl.topology.model import Topology

__all__ = ["Port", "BoxFabric", "box_fabric", "msccl_steps", "hierarchical_subchunks",
           "solve_hierarchical", "rail_slots", "solve_in_switch_allreduce"]

HIERARCHY = "scheduling the box hierarchy"  # what a deadline reached interrupted
OVERHEAD = 0.01  # sub-chunk until pipeline fill and drain cost at most this share of the time


@dataclass(frozen=True)
class Port:
    """GPU ``exit`` of one box to GPU ``entry`` of another, through switch ``via`` (or direct)."""

    exit: str
    via: str | None
    entry: str

    @property
    def first(self) -> tuple[str, str]:
        """The exit's link this port starts on."""
        return (self.exit, self.via or self.entry)


@dataclass(frozen=True)
class BoxFabric:
    """GPUs per box, each box's switch, and the ports from box ``a`` to box ``c``."""

    boxes: tuple[tuple[str, ...], ...]
    switches: tuple[str, ...]
    ports: dict[tuple[int, int], tuple[Port, ...]] = field(compare=False)


def _box_of(topo: Topology) -> dict[str, int] | None:
    """GPU → box index from the ``boxes`` generator's metadata and ``b{a}.`` names."""
    meta = topo.meta or {}
    count, per_box = meta.get("boxes"), meta.get("box_gpus")
    if not count or not per_box or topo.ngpus != count * per_box:
        return None
    box = {g: r // per_box for r, g in enumerate(topo.gpus)}
    if any(not g.startswith(f"b{a}.") for g, a in box.items()):
        return None
    return box


def box_fabric(topo: Topology) -> BoxFabric | None:
    """The box structure of ``topo``, or None when it is not boxes on a switch joined by ports.

    >>> from te_ccl.topology.generators import rail_optimized
    >>> f = box_fabric(rail_optimized(3, 2, 450e9, 50e9))
    >>> f.switches, f.ports[(0, 2)]
    (('b0.sw', 'b1.sw', 'b2.sw'), (Port(exit='b0.g0', via='rail0', entry='b2.g0'), \
Port(exit='b0.g1', via='rail1', entry='b2.g1')))
    """
    box = _box_of(topo)
    if box is None:
        return None
    count = max(box.values()) + 1
    switches = tuple(f"b{a}.sw" for a in range(count))
    for g, a in box.items():
        sw = switches[a]
        if sw not in topo.node_by_name or topo.node(sw).is_gpu or not (
                topo.has_link(g, sw) and topo.has_link(sw, g)):
            return None
    ports: dict[tuple[int, int], list[Port]] = defaultdict(list)
    for u in topo.gpus:
        for link in topo.out_links(u):
            w = link.dst
            if w in switches:
                continue
            if topo.node(w).is_gpu:
                if box[w] != box[u]:
                    ports[(box[u], box[w])].append(Port(u, None, w))
                continue
            for hop in topo.out_links(w):
                if hop.dst in box and box[hop.dst] != box[u]:
                    ports[(box[u], box[hop.dst])].append(Port(u, w, hop.dst))
    if len(ports) != count * (count - 1):
        return None
    rank = topo.rank
    return BoxFabric(tuple(tuple(g for g in topo.gpus if box[g] == a) for a in range(count)),
                     switches,
                     {key: tuple(sorted(ps, key=lambda p: (rank(p.exit), rank(p.entry))))
                      for key, ps in ports.items()})


def msccl_steps(fabric: BoxFabric, collective: Collective) -> float:
    """The most MSCCL steps of one GPU per sub-chunk factor ``k`` (before relays share them).

    A GPU receives ``N−1`` chunks per chunk of each rank and sends, through the box
    switch, each chunk it roots (its own and those entering at it) to ``G−1`` mates (a
    multicast lowers to one send per mate), plus those it sends across; twice for
    AllReduce (ReduceScatter, then AllGather).

    >>> from te_ccl.topology.generators import rail_optimized
    >>> ag = Collective(CollectiveKind.ALLGATHER, 1 << 20, tuple(range(64)))
    >>> msccl_steps(box_fabric(rail_optimized(8, 8, 450e9, 50e9)), ag)  # 63 + 8·7 + 7
    126.0
    """
    entries: dict[str, float] = defaultdict(float)
    exits: dict[str, float] = defaultdict(float)
    for (a, _), ports in fabric.ports.items():
        for p in ports:
            entries[p.entry] += len(fabric.boxes[a]) / len(ports)
            exits[p.exit] += len(fabric.boxes[a]) / len(ports)
    sends = max((1 + entries[g]) * (len(gpus) - 1) + exits[g]
                for gpus in fabric.boxes for g in gpus)
    phases = 2 if collective.kind is CollectiveKind.ALLREDUCE else 1
    return (collective.nranks - 1 + sends) * collective.chunks_per_rank * phases


def hierarchical_subchunks(topo: Topology, collective: Collective, limit: int) -> int:
    """The fewest sub-chunks ``k`` (≤ ``limit``) whose fill and drain cost ≤ OVERHEAD of the time.

    Time ≈ the box ingress (foreign chunks over the box's entry links) or a GPU's ingress,
    whichever is longer, plus the α of a cross-and-spread path, plus the fill and drain:
    one sub-chunk time (and up to one epoch of rounding) on each hop of that path.
    At 1 KB α dominates and ``k = 1`` (fewest hops); at 1 GB ``k`` is a few dozen.
    Each sub-chunk a GPU receives or sends is one MSCCL step, so ``k`` also keeps
    :func:`msccl_steps` × ``k`` within the reader's element limit
    (:func:`~te_ccl.backends.scale.msccl_budget.max_subchunks`: the lowered algorithm must
    still load).
    """
    fabric = box_fabric(topo)
    assert fabric is not None
    size = collective.chunk_bytes * collective.chunks_per_rank  # one rank's data
    n, fastest = collective.nranks, max(k.bandwidth_Bps for k in topo.links)
    ingress = max((n - 1) * size / sum(k.bandwidth_Bps for k in topo.in_links(g))
                  for g in topo.gpus)
    for c, gpus in enumerate(fabric.boxes):
        entries = {(p.via or p.exit, p.entry) for (_, to), ps in fabric.ports.items() if to == c
                   for p in ps}
        bandwidth = sum(topo.link(*key).bandwidth_Bps for key in entries)
        ingress = max(ingress, (n - len(gpus)) * size / bandwidth)
    port = fabric.ports[(0, 1)][0]
    path = [port.first] + ([(port.via, port.entry)] if port.via else [])
    path += [(port.entry, fabric.switches[1]), (fabric.switches[1], port.entry)]
    alpha = sum(topo.link(*key).latency_s for key in path)
    per_byte = sum(1 / topo.link(*key).bandwidth_Bps + 1 / fastest for key in path)
    steps = msccl_steps(fabric, collective)
    limit = min(limit, max_subchunks(n, steps))
    ks = [k for k in range(1, max(1, limit) + 1) if collective.chunk_bytes // k >= 1] or [1]
    return next((k for k in ks if collective.chunk_bytes / k * per_byte
                 <= OVERHEAD * (ingress + alpha)), ks[-1])


class _Calendar:
    """Starts per link and epoch: a start fits when the link's timing allows one more."""

    def __init__(self, problem: Problem) -> None:
        self.timings = problem.timings
        self.used: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)

    def fits(self, key: tuple[str, str], epoch: int) -> bool:
        lt, used = self.timings[key], self.used[key]
        if lt.occupancy == 1:
            return used.get(epoch, 0) < lt.capacity
        if len(used) < 2 * lt.occupancy:  # a slow link: fewer starts than epochs to look at
            return all(abs(e - epoch) >= lt.occupancy for e in used)
        return all(e not in used for e in range(epoch - lt.occupancy + 1, epoch + lt.occupancy))

    def take(self, key: tuple[str, str], epoch: int) -> int:
        """Book a start; returns the arrival epoch."""
        used = self.used[key]
        used[epoch] = used.get(epoch, 0) + 1
        return epoch + self.timings[key].delay


@dataclass
class _Spread:
    """Chunk ``chunk``, ready from ``ready``, held by ``holders`` and owed to ``left`` (one box).

    Every GPU that got the chunk may forward it too (see ``_Run._forwarders``): with
    unicasts the spread then doubles each round instead of loading one GPU's link with
    all of it. ``urgent``: mates that send
    the chunk on to another box (served first). ``passes``: epochs in which
    the box switch forwards the chunk; a switch that may not copy forwards it once per
    epoch (played backwards, two partials meeting there would need an in-switch sum).
    """

    ready: int
    chunk: int
    holders: list[str]
    left: set[str]
    urgent: frozenset[str] = frozenset()
    passes: set[int] = field(default_factory=set)

    def key(self) -> tuple[int, int]:
        return (self.ready, self.chunk)


class _Run:
    """The list scheduler of the module docstring: cross on the ports, spread in the boxes."""

    def __init__(self, problem: Problem, fabric: BoxFabric, owned: dict[str, list[int]]) -> None:
        self.problem, self.fabric, self.cal = problem, fabric, _Calendar(problem)
        self.box = {g: a for a, gpus in enumerate(fabric.boxes) for g in gpus}
        self.source = {x: g for g, xs in owned.items() for x in xs}
        self.held: dict[tuple[int, str], int] = {(x, g): 0 for x, g in self.source.items()}
        self.out: list[Transfer] = []
        self.wake: list[int] = []
        self.waiting: list[tuple[int, int, _Spread]] = []
        self.active: list[list[_Spread]] = [[] for _ in fabric.boxes]
        self.slot = {g: i for gpus in fabric.boxes for i, g in enumerate(gpus)}
        total = sum(len(xs) for xs in owned.values())
        self.owed = {g: total - len(owned[g]) for g in self.box}  # chunks still to receive
        self.queues = self._deal(owned)
        relays: dict[int, set[str]] = defaultdict(set)
        for q in self.queues.values():
            for x, p in q:
                if self.source[x] != p.exit:
                    relays[x].add(p.exit)
        for g, xs in owned.items():
            for x in xs:
                self._add(_Spread(0, x, [g], self._mates(g),
                                  frozenset(relays.get(x, ()))))
        self.forwarders = [self._forwarders(a, owned) for a in range(len(fabric.boxes))]

    def _forwarders(self, a: int, owned: dict[str, list[int]]) -> slice:
        """Which holders of a chunk in box ``a`` send it on: the first (its root) or all.

        Only with unicasts can a root's up-link be the bottleneck: a GPU that roots ``r``
        chunks sends ``r·(G−1)`` of them. When that exceeds what the busiest in-link of
        the box must take, every holder forwards (newest first, so the sending spreads);
        otherwise the roots alone send (fewer relays: fewer MSCCL thread blocks).
        """
        if self.fabric.switches[a] in self.problem.copy_nodes:
            return slice(0, 1)
        gpus = self.fabric.boxes[a]
        entries = Counter(p.entry for q in self.queues.values() for _, p in q)
        rooted = max(len(owned[g]) + entries[g] for g in gpus) * (len(gpus) - 1)
        return slice(None, None, -1) if rooted > max(self.owed[g] - entries[g] for g in gpus) \
            else slice(0, 1)

    def _mates(self, holder: str) -> set[str]:
        return set(self.fabric.boxes[self.box[holder]]) - {holder}

    def _deal(self, owned: dict[str, list[int]]) -> dict[tuple[str, str], list[tuple[int, Port]]]:
        """Each chunk of box ``a`` to one port towards each box ``c``; queues per exit link.

        Chunks go to the exits in proportion. An exit with several ports (boxes joined by
        one switch: a port to every GPU of the other box) deals its chunks round-robin over
        them, starting at its own slot, so at each turn the exits of a box send to distinct
        entries (a Latin square) instead of all queueing on the first entry's link.
        """
        queues: dict[tuple[str, str], list[tuple[tuple, int, Port]]] = defaultdict(list)
        nbox = len(self.fabric.boxes)
        for (a, c), ports in self.fabric.ports.items():
            chunks = [x for g in self.fabric.boxes[a] for x in owned[g]]
            of_exit: dict[str, list[Port]] = defaultdict(list)
            for p in ports:
                of_exit[p.exit].append(p)
            dealt: Counter[str] = Counter()
            for i, x in enumerate(chunks):
                mine = of_exit[ports[i * len(ports) // len(chunks)].exit]
                p = mine[(dealt[mine[0].exit] + self.slot[mine[0].exit]) % len(mine)]
                dealt[p.exit] += 1
                order = (self.source[x] != p.exit, i, (c - a) % nbox)
                queues[p.first].append((order, x, p))
        return {key: [(x, p) for _, x, p in sorted(q, key=lambda e: e[0])]
                for key, q in queues.items()}

    def _add(self, item: _Spread) -> None:
        heapq.heappush(self.waiting, (item.ready, id(item), item))
        heapq.heappush(self.wake, item.ready)

    def _send(self, x: int, key: tuple[str, str], epoch: int) -> int:
        arrive = self.cal.take(key, epoch)
        self.out.append(Transfer(x, key[0], key[1], epoch, arrive))
        if self.problem.topology.node(key[1]).is_gpu:
            self.held[(x, key[1])] = arrive
            self.owed[key[1]] -= 1
            heapq.heappush(self.wake, arrive)
        return arrive

    def _cross(self, t: int) -> bool:
        """Start the first sendable port transfer on each free exit link; True if one had to wait."""
        blocked = False
        window = len(self.fabric.boxes)
        for first, queue in self.queues.items():
            if not queue or not self.cal.fits(first, t):
                blocked |= bool(queue)
                continue
            d = self.problem.timings[first].delay
            for i, (x, p) in enumerate(queue[:window]):
                if self.held.get((x, p.exit), t + 1) > t:
                    continue
                if p.via and not self.cal.fits((p.via, p.entry), t + d):
                    blocked = True
                    continue
                arrive = self._send(x, first, t)
                heapq.heappush(self.wake, t + self.problem.timings[first].occupancy)
                if p.via:
                    arrive = self._send(x, (p.via, p.entry), arrive)
                self._add(_Spread(arrive, x, [p.entry], self._mates(p.entry)))
                del queue[i]
                break
        return blocked

    def _spread(self, t: int) -> bool:
        """Box-switch sends starting at ``t``; True if some ready chunk had to wait."""
        while self.waiting and self.waiting[0][0] <= t:
            item = heapq.heappop(self.waiting)[2]
            self.active[self.box[item.holders[0]]].append(item)
        blocked = False
        for b, items in enumerate(self.active):
            sw = self.fabric.switches[b]
            copy = sw in self.problem.copy_nodes
            free: dict[int, set[str]] = {}  # epoch → box GPUs whose in-link can still start
            items.sort(key=_Spread.key)
            for item in items:
                if free and not any(free.values()):
                    break
                for h in item.holders[self.forwarders[b]]:
                    if item.left and self.held[(item.chunk, h)] <= t:
                        self._forward(item, h, sw, copy, t, free)
            self.active[b] = [item for item in items if item.left]
            blocked |= bool(self.active[b])
        return blocked

    def _forward(self, item: _Spread, h: str, sw: str, copy: bool, t: int,
                 free: dict[int, set[str]]) -> None:
        """``h`` sends the chunk through the box switch at ``t`` to free mates still owed it.

        Unicast: the urgent mate first, else the next one after ``h`` (all GPUs of a box
        spreading at once then form a permutation).
        """
        up = (h, sw)
        if not self.cal.fits(up, t):
            return
        there = t + self.problem.timings[up].delay
        if not copy and there in item.passes:
            return
        if there not in free:
            free[there] = {g for g in self.fabric.boxes[self.box[h]]
                           if self.cal.fits((sw, g), there)}
        to = item.left & free[there]
        if not to:
            return
        if not copy:
            size, i = len(self.fabric.boxes[self.box[h]]), self.slot[h]
            to = {min(to, key=lambda g: (g not in item.urgent, -self.owed[g],
                                         (self.slot[g] - i) % size))}
        item.passes.add(there)
        self._send(item.chunk, up, t)
        for g in sorted(to, key=self.slot.get):
            self._send(item.chunk, (sw, g), there)
            if not self.cal.fits((sw, g), there):
                free[there].discard(g)
        item.left.difference_update(to)
        item.holders += sorted(to, key=self.slot.get)

    def run(self) -> list[Transfer]:
        t = 0
        while True:
            check(HIERARCHY)
            blocked = self._cross(t) | self._spread(t)
            if blocked:
                t += 1
                continue
            while self.wake and self.wake[0] <= t:
                heapq.heappop(self.wake)
            if not self.wake:
                break
            t = heapq.heappop(self.wake)
        if any(self.queues.values()) or self.waiting or any(self.active):
            raise SolverError("hierarchical: chunks left that no transfer can bring")
        return self.out


def solve_hierarchical(problem: Problem) -> tuple[Moves, tuple[str, ...]] | None:
    """(moves, notes), or None when the topology or the demands do not fit."""
    fabric = box_fabric(problem.topology)
    owned = chunks_by_source(problem)
    if fabric is None or owned is None or problem.relay_limit:
        return None
    transfers = _Run(problem, fabric, owned).run()
    copy = all(sw in problem.copy_nodes for sw in fabric.switches)
    nports = sum(len(ps) for ps in fabric.ports.values())
    notes = (f"hierarchical: {len(fabric.boxes)} boxes × {len(fabric.boxes[0])} GPUs, "
             f"{nports} inter-box ports; each chunk crosses once to every other box, then "
             f"spreads by the box switch ({'multicast' if copy else 'unicast'}), "
             f"list-scheduled per epoch",)
    return Moves.of(tuple(n.name for n in problem.topology.nodes), transfers), notes


def rail_slots(fabric: BoxFabric) -> bool:
    """Whether every pair of boxes is joined slot to slot (port ``j``: GPU ``j`` to GPU ``j``)."""
    size = len(fabric.boxes[0])
    return all(len(gpus) == size for gpus in fabric.boxes) and all(
        len(ports) == size and all(p.exit == fabric.boxes[a][j] and p.entry == fabric.boxes[c][j]
                                   for j, p in enumerate(ports))
        for (a, c), ports in fabric.ports.items())


class _InSwitch:
    """The AllReduce of :func:`solve_in_switch_allreduce`, placed chunk by chunk on calendars."""

    def __init__(self, problem: Problem, fabric: BoxFabric) -> None:
        self.problem, self.fabric, self.cal = problem, fabric, _Calendar(problem)
        self.out: list[Transfer] = []

    def _delay(self, key: tuple[str, str]) -> int:
        return self.problem.timings[key].delay

    def _put(self, x: int, key: tuple[str, str], t: int, op: str = "copy") -> int:
        arrive = self.cal.take(key, t)
        self.out.append(Transfer(x, key[0], key[1], t, arrive, op))
        return arrive

    def reduce(self, x: int, b: int, reader: str) -> int:
        """The GPUs of box ``b`` but ``reader`` send their partials of ``x`` up so that all
        meet in the switch in one epoch; ``reader`` reads the sum (adding its own). Returns
        when it holds it."""
        sw = self.fabric.switches[b]
        ups = {g: self._delay((g, sw)) for g in self.fabric.boxes[b] if g != reader}
        at = max(ups.values())
        while not (self.cal.fits((sw, reader), at)
                   and all(self.cal.fits((g, sw), at - d) for g, d in ups.items())):
            at += 1
        for g, d in ups.items():
            self._put(x, (g, sw), at - d, "reduce")
        return self._put(x, (sw, reader), at, "reduce")

    def multicast(self, x: int, b: int, root: str, ready: int) -> None:
        """``root`` stores ``x`` into the switch of box ``b``, which copies it to the others."""
        sw = self.fabric.switches[b]
        mates = [g for g in self.fabric.boxes[b] if g != root]
        t, d = ready, self._delay((root, sw))
        while not (self.cal.fits((root, sw), t)
                   and all(self.cal.fits((sw, g), t + d) for g in mates)):
            t += 1
        there = self._put(x, (root, sw), t)
        for g in mates:
            self._put(x, (sw, g), there)

    def cross(self, x: int, port: Port, ready: int, op: str) -> int:
        """``x`` over ``port`` from ``ready`` (a switch on the way forwards it on arrival);
        ``op`` is what the entry GPU does with it."""
        t = ready
        while not (self.cal.fits(port.first, t) and (
                port.via is None or self.cal.fits((port.via, port.entry),
                                                  t + self._delay(port.first)))):
            t += 1
        if port.via is None:
            return self._put(x, port.first, t, op)
        return self._put(x, (port.via, port.entry), self._put(x, port.first, t), op)

    def chunk(self, x: int, home: int, slot: int) -> None:
        """Chunk ``x`` summed in box ``home`` through the GPUs of ``slot`` (see the docstring)."""
        boxes, ports = self.fabric.boxes, self.fabric.ports
        entry = boxes[home][slot]
        summed = self.reduce(x, home, entry)
        for a, gpus in enumerate(boxes):
            if a != home:
                got = self.reduce(x, a, gpus[slot])
                summed = max(summed, self.cross(x, ports[(a, home)][slot], got, "reduce"))
        self.multicast(x, home, entry, summed)
        for a, gpus in enumerate(boxes):
            if a != home:
                self.multicast(x, a, gpus[slot], self.cross(x, ports[(home, a)][slot], summed,
                                                            "copy"))


def solve_in_switch_allreduce(topology: Topology, collective: Collective, epoch_s: float
                              ) -> tuple[list[Transfer], tuple[str, ...]] | None:
    """An AllReduce over every GPU of boxes whose switches reduce and multicast (NVLink
    SHARP, FRED), joined slot to slot (rails); None where that does not hold.

    Chunk ``x`` is summed in box ``h`` (boxes in turn) through slot ``j`` (slots in turn):
    in every other box the GPUs send their partials of ``x`` to the box switch together,
    which hands the sum to GPU ``j``, which sends it to GPU ``j`` of box ``h`` over their
    port; there the box's partials (GPU ``j``'s with what came in) meet in the switch,
    which multicasts the total to the whole box, and GPU ``j`` sends it across to GPU
    ``j`` of every other box, which stores it into its switch for a multicast to its
    mates. Each GPU sends every chunk once into its switch (and the chunks of its slot
    once more), and the ports carry each chunk twice per box. Chunks are placed one after another, each
    transfer at the first epoch its link's calendar allows, so the in-box sums of later
    chunks run while earlier ones cross: the phases pipeline over the sub-chunks.
    """
    fabric = box_fabric(topology)
    if (fabric is None or collective.kind is not CollectiveKind.ALLREDUCE
            or collective.nranks != topology.ngpus or not rail_slots(fabric)):
        return None
    if not all(topology.node(sw).can_reduce and topology.node(sw).can_copy
               for sw in fabric.switches):
        return None
    problem = make_problem(topology, collective.chunk_bytes, (), epoch_s=epoch_s)
    run = _InSwitch(problem, fabric)
    nbox, size = len(fabric.boxes), len(fabric.boxes[0])
    for i in range(collective.nchunks):
        check(HIERARCHY)
        run.chunk(i, i % nbox, i // nbox % size)
    notes = (f"hierarchical in-switch: {nbox} boxes × {size} GPUs; each chunk summed in "
             f"the box switches, across the ports to one box, its total multicast back by "
             f"every box switch, chunk after chunk on per-link calendars",)
    return run.out, notes
