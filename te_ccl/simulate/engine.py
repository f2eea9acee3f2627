"""Event-driven α-β replay of link transfers with contention, in continuous time.

The engine knows nothing of epochs or of the solver: it is given :class:`Task` s (one
chunk on one directed link) with their dependencies and, per link, the order in which
the link serves them. The cost model is the one of ``te_ccl.schedule`` (after TE-CCL):

* a link carries one chunk at a time; a chunk of ``n`` bytes keeps it busy ``n / b``;
* the chunk arrives ``α`` after the link is done with it (α delays arrival only);
* a task may start once every task in ``after_all`` has arrived, every task in
  ``after_sent`` has left its link and, if ``after_any`` is not empty, at least one of
  those has arrived; it then waits for its link;
* a task without a link is a zero-time join;
* a task marked ``through`` forwards cut-through what its dependencies bring (it leaves
  a switch without buffer): it waits for their heads (start + α) instead of their
  arrival, and keeps its link busy at least until their tails have arrived.

Links serve their tasks in the given order (``order`` of :func:`run`, a schedule's FIFO)
or, for links without a given order, first-ready first-served (ties by task id).
Tasks that are not ``through`` store and forward: a chunk leaves once it has fully arrived.

>>> from te_ccl.topology import Link, Node, Topology
>>> topo = Topology.build("p", [Node("a"), Node("b")], [Link("a", "b", 1e9, 1e-6)])
>>> times = run(topo, [Task(("a", "b"), 1000), Task(("a", "b"), 1000, after_all=(0,))])
>>> [(t.start_s, t.arrive_s) for t in times]
[(0.0, 2e-06), (2e-06, 4e-06)]
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from dataclasses import dataclass

from te_ccl.errors import VerificationError
from te_ccl.topology.model import Link, Topology

__all__ = ["Task", "TaskTimes", "run"]


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


class _Run:
    def __init__(self, topology: Topology, tasks: list[Task],
                 order: dict[tuple[str, str], list[int]] | None) -> None:
        self.topo, self.tasks = topology, tasks
        self.specs: dict[tuple[str, str], Link] = {}  # the links looked up so far
        self.fixed = {k: deque(v) for k, v in (order or {}).items()}
        self.ready_heap: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
        self.ready_at: dict[int, float] = {}
        self.free_at: dict[tuple[str, str], float] = defaultdict(float)
        self.busy: set[tuple[str, str]] = set()
        self.times: dict[int, TaskTimes] = {}
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, seq, id)
        self.seq = 0
        self.missing_all = [len(set(t.after_all)) + len(set(t.after_sent)) for t in tasks]
        self.any_done = [not t.after_any for t in tasks]
        self.trigger: dict[int, int] = {}  # through task -> the after_any dep that freed it
        self.dependents: dict[int, list[int]] = defaultdict(list)
        self.head_dependents: dict[int, list[int]] = defaultdict(list)
        self.sent_dependents: dict[int, list[int]] = defaultdict(list)
        for i, t in enumerate(tasks):
            waits = self.head_dependents if t.through else self.dependents
            for d in {*t.after_all, *t.after_any}:
                waits[d].append(i)
            for d in set(t.after_sent):
                self.sent_dependents[d].append(i)

    def push(self, time: float, kind: int, ident: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time, kind, self.seq, ident))

    def make_ready(self, i: int, now: float) -> None:
        self.ready_at[i] = now
        link = self.tasks[i].link
        if link is None:
            self.times[i] = TaskTimes(now, now, now, now)
            for kind in (0, 1, 2):
                self.push(now, kind, i)
            return
        if link not in self.fixed:
            heapq.heappush(self.ready_heap[link], (now, i))
        self.try_start(link, now)

    def next_task(self, link: tuple[str, str]) -> int | None:
        if link in self.fixed:
            q = self.fixed[link]
            return q[0] if q and q[0] in self.ready_at else None
        heap = self.ready_heap[link]
        return heap[0][1] if heap else None

    def try_start(self, link: tuple[str, str], now: float) -> None:
        if link in self.busy:
            return
        i = self.next_task(link)
        if i is None:
            return
        if link in self.fixed:
            self.fixed[link].popleft()
        else:
            heapq.heappop(self.ready_heap[link])
        spec = self.specs.get(link) or self.specs.setdefault(link, self.topo.link(*link))
        task = self.tasks[i]
        start = max(now, self.free_at[link])
        end = start + task.nbytes / spec.bandwidth_Bps
        if task.through:  # the tail cannot leave before it has come in
            tails = [self.times[d].arrive_s for d in task.after_all]
            if i in self.trigger:
                tails.append(self.times[self.trigger[i]].arrive_s)
            end = max([end, *tails])
        self.times[i] = TaskTimes(self.ready_at[i], start, end, end + spec.latency_s)
        self.busy.add(link)
        self.push(end, 0, i)  # link free
        self.push(end + spec.latency_s, 1, i)  # arrival
        if self.head_dependents.get(i):
            self.push(start + spec.latency_s, 2, i)  # the head is at the far end

    def notify(self, i: int, now: float, kind: int) -> None:
        """Task ``i`` left its link (kind 0), arrived (1) or its head arrived (2): release
        what waited for it."""
        sent = kind == 0
        waiting = (self.sent_dependents, self.dependents, self.head_dependents)[kind]
        for j in waiting.get(i, ()):
            t = self.tasks[j]
            if sent or i in t.after_all:
                self.missing_all[j] -= 1
            if not sent and i in t.after_any and not self.any_done[j]:
                self.any_done[j] = True
                if t.through:
                    self.trigger[j] = i
            if self.missing_all[j] == 0 and self.any_done[j] and j not in self.ready_at:
                self.make_ready(j, now)

    def execute(self) -> list[TaskTimes]:
        for i in range(len(self.tasks)):
            if self.missing_all[i] == 0 and self.any_done[i]:
                self.make_ready(i, 0.0)
        while self.events:
            now, kind, _, i = heapq.heappop(self.events)
            link = self.tasks[i].link
            if kind == 0 and link is not None:
                self.busy.discard(link)
                self.free_at[link] = now
                self.try_start(link, now)
            self.notify(i, now, kind)
        if len(self.times) < len(self.tasks):
            stuck = [i for i in range(len(self.tasks)) if i not in self.times]
            first = self.tasks[stuck[0]]
            where = f" on {first.link[0]}->{first.link[1]}" if first.link else ""
            raise VerificationError(
                f"simulation deadlocked: {len(stuck)} transfer(s) never started "
                f"(first: {first.label or stuck[0]}{where})")
        return [self.times[i] for i in range(len(self.tasks))]


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
