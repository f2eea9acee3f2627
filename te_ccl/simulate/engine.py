"""The replay engine: one α-β link model and one event queue, for every replay.

Every replay of this package — schedules and MSCCL++ plans (:func:`run`, over
:class:`Task` s) and MSCCL XML (:mod:`te_ccl.simulate.msccl`, over the file's steps) —
moves messages with :class:`Links` and orders its events with :class:`Events`. The link
model (after TE-CCL, the rules of ``te_ccl.schedule``):

* a link carries one message at a time, first come first served (or in an order it is
  given); ``n`` bytes keep it busy ``n / b``;
* a message arrives ``α`` after the link is done with it (α delays arrival only);
* a switch without buffer forwards cut-through (:func:`cuts_through`): the message goes
  on once its head has arrived (start + α) and the next link is free, and cannot leave
  that link before its tail has arrived; a GPU and a switch with buffer store and
  forward (the message goes on once it has fully arrived).

:func:`run` replays tasks (one message on one directed link) with dependencies:

* a task may start once every task in ``after_all`` has arrived, every task in
  ``after_sent`` has left its link and, if ``after_any`` is not empty, at least one of
  those has arrived; it then waits for its link;
* a task without a link is a zero-time join;
* a task marked ``through`` leaves a switch without buffer: it waits for its
  dependencies' heads instead of their arrival, and keeps its link busy at least until
  their tails have arrived.

Links serve their tasks in the given order (``order`` of :func:`run`, a schedule's FIFO)
or, for links without a given order, first-ready first-served (ties by task id).

>>> from te_ccl.topology import Link, Node, Topology
>>> topo = Topology.build("p", [Node("a"), Node("b")], [Link("a", "b", 1e9, 1e-6)])
>>> times = run(topo, [Task(("a", "b"), 1000), Task(("a", "b"), 1000, after_all=(0,))])
>>> [(t.start_s, t.arrive_s) for t in times]
[(0.0, 2e-06), (2e-06, 4e-06)]
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from te_ccl.deadline import check
from te_ccl.errors import VerificationError
from te_ccl.topology.model import Node, Topology

__all__ = ["Task", "TaskTimes", "run", "Links", "Events", "cuts_through"]


def cuts_through(node: Node) -> bool:
    """Does ``node`` forward a message as it comes in (a switch without buffer)?"""
    return not node.is_gpu and not node.has_buffer


class Links:
    """The state of the links a replay uses, by index: when each is free, its busy time
    and use count. Sizes are counted in ``unit`` bytes (a replay's chunk: the XML replay
    multiplies a send's chunk count by the link's seconds per chunk)."""

    __slots__ = ("keys", "per_unit", "latency", "cut", "free", "busy", "uses")

    def __init__(self, topology: Topology, keys: Sequence[tuple[str, str]],
                 unit: float = 1.0) -> None:
        specs = [topology.link(*key) for key in keys]
        self.keys = list(keys)
        self.per_unit = [unit / x.bandwidth_Bps for x in specs]  # seconds per unit
        self.latency = [x.latency_s for x in specs]
        self.cut = [cuts_through(topology.node(key[1])) for key in keys]  # far end
        self.free = [0.0] * len(specs)
        self.busy = [0.0] * len(specs)
        self.uses = [0] * len(specs)

    def put(self, k: int, now: float, amount: float, tail: float = 0.0) -> tuple[float, float]:
        """Send ``amount`` units on link ``k`` from ``now`` or when it is free; returns
        ``(start, end)``. ``tail``: when the message's tail reaches the link (a cut-through
        hop cannot end before). It arrives at ``end + latency[k]``; its head is at the far
        end at ``(start if cut[k] else end) + latency[k]``."""
        free = self.free[k]
        start = free if free > now else now
        end = start + amount * self.per_unit[k]
        if tail > end:
            end = tail
        self.free[k] = end
        self.busy[k] += end - start
        self.uses[k] += 1
        return start, end


class Events:
    """Integer event codes by time: taken in time order and, at one time, in code order,
    whether queued before or at that time. The times are kept in a heap and the codes per
    time in a list (at 1024 GPUs millions of events fall on far fewer times)."""

    __slots__ = ("queue", "times", "now", "current", "pos", "taking")

    def __init__(self) -> None:
        self.now = 0.0
        self.current: list[int] = []  # the codes at ``now``: those from ``pos`` on to take
        self.queue: dict[float, list[int]] = {0.0: self.current}
        self.times: list[float] = []
        self.pos = self.taking = 0

    def push(self, t: float, code: int) -> None:
        """Queue ``code`` at time ``t`` (not before ``now``)."""
        codes = self.queue.get(t)
        if codes is None:
            self.queue[t] = [code]
            heapq.heappush(self.times, t)
        else:
            codes.append(code)

    def pop(self) -> int:
        """The next code (its time is then ``now``), or -1 when none is left."""
        current, pos = self.current, self.pos
        if pos == len(current):  # the codes at ``now`` are taken: the next time's
            if not self.times:
                return -1
            del self.queue[self.now]
            self.now = now = heapq.heappop(self.times)
            self.current = current = self.queue[now]
            current.sort()
            pos, self.taking = 0, len(current)
        elif len(current) != self.taking:  # a code at ``now`` itself was added
            current[pos:] = sorted(current[pos:])
            self.taking = len(current)
        self.pos = pos + 1
        return current[pos]


@dataclass(frozen=True)
class Task:
    """``nbytes`` on directed link ``link`` (None: a zero-time join); ``label`` names it."""

    link: tuple[str, str] | None
    nbytes: float
    after_all: tuple[int, ...] = ()
    after_any: tuple[int, ...] = ()
    label: str = ""
    after_sent: tuple[int, ...] = ()
    through: bool = False


@dataclass(frozen=True)
class TaskTimes:
    """When a task was ready, started on its link, left the link, and arrived."""

    ready_s: float
    start_s: float
    end_s: float
    arrive_s: float


_SENT, _ARRIVED, _HEAD = 0, 1, 2  # a task left its link, arrived, its head reached the far end
_SEQ_BITS = 40  # an event's code is kind << _SEQ_BITS | its number: kind first, then push order
_CHECK_MASK = (1 << 14) - 1  # events between two looks at the deadline (milliseconds apart)
REPLAYING = "replaying the schedule"


class _Run:
    """The event loop over flat per-task lists (no dict lookup per event: a schedule
    judged by its replay has up to 100k transfers, and ``auto`` replays each candidate)."""

    def __init__(self, topology: Topology, tasks: list[Task],
                 order: dict[tuple[str, str], list[int]] | None) -> None:
        self.tasks = tasks
        n = len(tasks)
        index: dict[tuple[str, str], int] = {}
        self.link = [-1] * n  # link index of each task, -1 for a join
        for i, t in enumerate(tasks):
            if t.link is not None:
                self.link[i] = index.setdefault(t.link, len(index))
        for key in order or {}:
            index.setdefault(key, len(index))
        # sizes in the tasks' first size: each task is then one unit, exactly as n / b
        unit = next((t.nbytes for t in tasks if t.link is not None and t.nbytes > 0), 1.0)
        self.amount = [t.nbytes / unit for t in tasks]
        self.links = Links(topology, list(index), unit)
        self.fixed: list[deque[int] | None] = [None] * len(index)
        for key, seq in (order or {}).items():
            self.fixed[index[key]] = deque(seq)
        self.ready_heap: list[list[tuple[float, int]]] = [[] for _ in index]
        self.ready_at: list[float | None] = [None] * n
        self.serving = [False] * len(index)  # a link is serving a task
        self.times: list[TaskTimes | None] = [None] * n
        self.events = Events()
        self.queue = self.events.push
        self.pushed: list[int] = []  # the task of each event, by its number
        self.missing_all = [len(set(t.after_all)) + len(set(t.after_sent)) for t in tasks]
        self.any_done = [not t.after_any for t in tasks]
        self.trigger: dict[int, int] = {}  # through task -> the after_any dep that freed it
        # per task and kind: (dependent, counts for its after_all, is in its after_any)
        self.waiting: list[dict[int, list[tuple[int, bool, bool]]]] = [{}, {}, {}]
        sent, arrived, head = self.waiting
        for j, t in enumerate(tasks):
            waits = head if t.through else arrived
            alls, anys = set(t.after_all), set(t.after_any)  # sets: a join may wait for
            for d in alls | anys:  # hundreds (an NVLS op's members)
                waits.setdefault(d, []).append((j, d in alls, d in anys))
            for d in set(t.after_sent):
                sent.setdefault(d, []).append((j, True, False))

    def push(self, time: float, kind: int, ident: int) -> None:
        pushed = self.pushed
        self.queue(time, kind << _SEQ_BITS | len(pushed))
        pushed.append(ident)

    def make_ready(self, i: int, now: float) -> None:
        self.ready_at[i] = now
        k = self.link[i]
        if k < 0:
            self.times[i] = TaskTimes(now, now, now, now)
            for kind in (_SENT, _ARRIVED, _HEAD):
                self.push(now, kind, i)
            return
        if self.fixed[k] is None:
            heapq.heappush(self.ready_heap[k], (now, i))
        self.try_start(k, now)

    def try_start(self, k: int, now: float) -> None:
        """Start the next task of link ``k`` if the link is free and the task ready."""
        if self.serving[k]:
            return
        fixed = self.fixed[k]
        if fixed is not None:
            if not fixed or self.ready_at[fixed[0]] is None:
                return
            i = fixed.popleft()
        else:
            heap = self.ready_heap[k]
            if not heap:
                return
            i = heapq.heappop(heap)[1]
        tail = 0.0
        if self.tasks[i].through:  # the tail cannot leave before it has come in
            tails = [self.times[d].arrive_s for d in self.tasks[i].after_all]
            if i in self.trigger:
                tails.append(self.times[self.trigger[i]].arrive_s)
            tail = max(tails, default=0.0)
        start, end = self.links.put(k, now, self.amount[i], tail)
        lat = self.links.latency[k]
        self.times[i] = TaskTimes(self.ready_at[i], start, end, end + lat)
        self.serving[k] = True
        pushed, queue, n = self.pushed, self.queue, len(self.pushed)
        queue(end, _SENT << _SEQ_BITS | n)
        queue(end + lat, _ARRIVED << _SEQ_BITS | n + 1)
        pushed += (i, i)
        if i in self.waiting[_HEAD]:
            self.push(start + lat, _HEAD, i)

    def notify(self, i: int, now: float, kind: int) -> None:
        """Task ``i`` left its link, arrived or its head arrived (``kind``): release what
        waited for it."""
        missing, any_done, ready_at = self.missing_all, self.any_done, self.ready_at
        for j, in_all, in_any in self.waiting[kind].get(i, ()):
            if in_all:
                missing[j] -= 1
            if in_any and not any_done[j]:
                any_done[j] = True
                if self.tasks[j].through:
                    self.trigger[j] = i
            if missing[j] == 0 and any_done[j] and ready_at[j] is None:
                self.make_ready(j, now)

    def execute(self) -> list[TaskTimes]:
        for i in range(len(self.tasks)):
            if self.missing_all[i] == 0 and self.any_done[i]:
                self.make_ready(i, 0.0)
        events, link, pushed, mask = self.events, self.link, self.pushed, (1 << _SEQ_BITS) - 1
        count = 0
        while (code := events.pop()) >= 0:
            count += 1
            if not count & _CHECK_MASK:
                check(REPLAYING)
            now, kind, i = events.now, code >> _SEQ_BITS, pushed[code & mask]
            k = link[i]
            if kind == _SENT and k >= 0:
                self.serving[k] = False
                self.try_start(k, now)
            self.notify(i, now, kind)
        if None in self.times:
            stuck = [i for i, t in enumerate(self.times) if t is None]
            first = self.tasks[stuck[0]]
            where = f" on {first.link[0]}->{first.link[1]}" if first.link else ""
            raise VerificationError(
                f"simulation deadlocked: {len(stuck)} transfer(s) never started "
                f"(first: {first.label or stuck[0]}{where})")
        return self.times


def run(topology: Topology, tasks: list[Task],
        order: dict[tuple[str, str], list[int]] | None = None) -> list[TaskTimes]:
    """Replay ``tasks`` on ``topology``; returns their times, index-aligned with ``tasks``.

    Raises
    ------
    VerificationError
        A task uses a missing link, or some tasks can never start (a dependency cycle or
        a link order that contradicts the dependencies).
    """
    for t in tasks:
        if t.link is not None and not topology.has_link(*t.link):
            raise VerificationError(f"{t.label or 'transfer'}: no link {t.link[0]} -> {t.link[1]}")
    return _Run(topology, tasks, order).execute()
