"""Replay an MSCCL++ execution plan on a topology's links (α-β), with the shared engine.

The plan is read by the plan checker's reader (:mod:`te_ccl.verify.mscclpp.model`) and
must pass the checker first (a plan that deadlocks or races has no meaningful time).
Rank ``r`` of the plan is GPU ``topology.gpus[r]``. The model, per thread block, op after
op (the engine's tasks; docs/runtimes.md):

* a put (and every op writing a peer's buffer) moves its bytes along the route to the
  peer (the direct link, else the fastest path; switches without buffer cut through);
  the op is done when the bytes have arrived (the block's threads write them);
  reading a peer's buffer (``get``, ``rre``) moves them the other way;
* a signal is a zero-byte message on the same route: the k-th wait on a channel is done
  once the k-th signal on its paired channel has arrived; semaphores, barriers and LL
  packets (a packet read waits for the packets written to its slot) join likewise;
* ``glres`` pulls every member's bytes into the NVLS switch linked to the whole group,
  which sends the sum to the reducer, who stores it back through the switch to every
  member, all cut-through (the block loads, adds and stores vector by vector), in
  :data:`PIECES` pieces so that concurrent multimem ops share the links;
  ``gstore`` is the store half;
* local copies and reductions, ``nop`` and the handshakes take no time.

A chunk is the message divided by the plan's chunk count (``output_chunks`` for
AllGather, whose size is its output, ``input_chunks`` otherwise, nccl-tests' sizes).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from te_ccl.errors import SpecError, VerificationError
from te_ccl.simulate.engine import Task, TaskTimes, cuts_through, run
from te_ccl.simulate.result import SimResult, finish_of, summarise
from te_ccl.topology.model import Topology
from te_ccl.topology.routes import fastest_path
from te_ccl.verify.mscclpp.model import SIGNALS, WAITS, Op, Plan, Ref, read_plan
from te_ccl.verify.mscclpp.verify import check_plan

__all__ = ["simulate_plan", "plan_finish_s"]

REMOTE_WRITES = {"put", "pws", "pwsf", "ppkt", "rppkt", "res", "rres", "respkt", "recspkt"}
REMOTE_READS = {"get", "rre", "rres"}
PACKET_WRITES = {"ppkt", "rppkt", "cpkt", "respkt", "recspkt", "recpkt", "gstorepkt"}
PIECES = 8  # a multimem op is replayed as this many pieces in a row


class _Builder:
    def __init__(self, plan: Plan, topology: Topology, chunk_bytes: float) -> None:
        self.plan, self.topo, self.chunk = plan, topology, chunk_bytes
        self.names = [topology.gpus[r] for r in range(len(plan.gpus))]
        self.graph = topology.graph()
        self.paths: dict[tuple[str, str], list[str] | None] = {}  # fastest_path's, once a pair
        self.tasks: list[Task] = []
        self.joins: dict[int, list[int]] = {}  # a pending join's dependencies (resolve)
        self.signals: dict[tuple, list[int]] = defaultdict(list)
        self.releases: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.arrivals: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.packets: dict[tuple[int, str, int], list[int]] = defaultdict(list)
        self.pending: list[tuple[int, Op, int]] = []  # (join task, op, nth use)
        self.done: dict[str, list[int]] = defaultdict(list)

    def task(self, link: tuple[str, str] | None, nbytes: float, after: list[int],
             label: str = "", through: bool = False, sent: list[int] | None = None) -> int:
        self.tasks.append(Task(link, nbytes, tuple(after), (), label, tuple(sent or ()),
                               through))
        return len(self.tasks) - 1

    def route(self, src: int, dst: int, nbytes: float, after: list[int], label: str) -> int:
        """The hops from rank ``src`` to ``dst``; returns the last hop's task."""
        u, v = self.names[src], self.names[dst]
        path = self.paths.get((u, v))
        if path is None:
            path = self.paths[(u, v)] = fastest_path(self.topo, u, v, graph=self.graph)
        if path is None:
            raise SpecError(f"no path from {u} to {v} on {self.topo.name}")
        return self.hops(path, nbytes, after, label)

    def hops(self, path: list[str], nbytes: float, after: list[int], label: str) -> int:
        last = -1
        for a, b in zip(path, path[1:], strict=False):
            through = cuts_through(self.topo.node(a))
            last = self.task((a, b), nbytes, after if last < 0 else [last], label, through)
        return last

    def size(self, ref: Ref) -> float:
        packets = 2 if self.plan.protocol == "LL" else 1
        return ref.size * self.chunk * packets / ref.parts

    def switch_of(self, group: tuple[int, ...]) -> str:
        members = [self.names[m] for m in group]
        for sw in self.topo.switches:
            if all(self.topo.has_link(m, sw) and self.topo.has_link(sw, m) for m in members):
                return sw
        raise SpecError(f"the NVLS group of ranks {list(group)} has no switch linked to all "
                        f"of them on {self.topo.name}")

    def op(self, op: Op, prev: list[int]) -> int:
        """The tasks of ``op`` after ``prev``; returns the task that is its end."""
        g, name, label = op.gpu, op.name, op.where()
        ends: list[int] = []
        if name in REMOTE_WRITES:
            for ref in op.dst:
                if ref.remote:
                    ends.append(self.route(g, ref.rank, self.size(ref), prev, label))
        if name in REMOTE_READS:
            for ref in op.src:
                if ref.remote:
                    ends.append(self.route(ref.rank, g, self.size(ref), prev, label))
        if name in ("glres", "gstore", "gstorepkt") and op.dst:
            ends.append(self.multimem(op, prev, label))
        if ends:
            prev = ends
        if name in SIGNALS:
            for peer, k in op.pairs:
                arrive = self.route(g, peer, 0.0, prev, label)
                self.signals[(g, peer, op.channel_type, k)].append(arrive)
        end = self.task(None, 0.0, prev, label)
        if name in WAITS or name in ("sem_acquire", "barrier") or op.packet_reads():
            self.pending.append((end, op, 0))
            self.joins[end] = list(prev)
        if name == "sem_release":
            for s in op.semaphores:
                self.releases[(g, s)].append(end)
        if name == "barrier" and op.barrier is not None:
            self.arrivals[(g, op.barrier[0])].append(self.task(None, 0.0, prev, label))
        if name in PACKET_WRITES:
            for ref in op.dst:
                for rank in ref.group or (ref.rank,):
                    self.packets[(rank, ref.buf, ref.index)].append(ends[0] if ends else end)
        return end

    def multimem(self, op: Op, prev: list[int], label: str) -> int:
        """``glres``/``gstore`` in :data:`PIECES` pieces one after the other, so that the
        multimem ops of several blocks share the links as the hardware interleaves them
        (the engine serves a link's messages whole, first come first served)."""
        group = op.dst[0].group
        sw, me = self.switch_of(group), self.names[op.gpu]
        nbytes = self.size(op.dst[0]) / PIECES
        ends: list[int] = []
        before: list[int] = []  # the previous piece's first tasks: this one follows them out
        for _ in range(PIECES):
            pulled = prev
            if op.name == "glres":
                ins = [self.task((self.names[m], sw), nbytes, prev, label, sent=before[i:i + 1])
                       for i, m in enumerate(group)]
                pulled, before = [self.task((sw, me), nbytes, ins, label, through=True)], ins
            up = self.task((me, sw), nbytes, pulled, label, through=op.name == "glres",
                           sent=[] if op.name == "glres" else before)
            before = before if op.name == "glres" else [up]
            ends += [self.task((sw, self.names[m]), nbytes, [up], label, through=True)
                     for m in group if m != op.gpu] or [up]
        return self.task(None, 0.0, ends, label)

    def resolve(self) -> None:
        """The joins that wait for signals, releases, barriers and packets."""
        taken: dict[Any, int] = defaultdict(int)
        for end, op, _ in self.pending:
            deps = self.joins[end]
            if op.name in WAITS:
                for peer, k in op.pairs:
                    key = (peer, op.gpu, op.channel_type, k)
                    deps.append(self.signals[key][taken[key]])
                    taken[key] += 1
            elif op.name == "sem_acquire":
                for s in op.semaphores:
                    key = (op.gpu, s)
                    init = self.plan.gpus[op.gpu].semaphores[s]
                    if taken[key] >= init:
                        deps.append(self.releases[key][taken[key] - init])
                    taken[key] += 1
            elif op.name == "barrier" and op.barrier is not None:
                key = ("barrier", op.gpu, op.barrier[0], op.block)
                n = op.barrier[1]
                gen = taken[key]
                deps.extend(self.arrivals[(op.gpu, op.barrier[0])][gen * n:(gen + 1) * n])
                taken[key] += 1
            for ref in op.packet_reads():
                deps.extend(self.packets[(op.gpu, ref.buf, ref.index)])
            self.tasks[end] = replace(self.tasks[end], after_all=tuple(deps))


def simulate_plan(data: Any, topology: Topology, size_bytes: int, *,
                  checked: bool = False) -> SimResult:
    """Replay the plan (its parsed JSON) with ``size_bytes`` (nccl-tests' size).

    Raises :class:`VerificationError` if the plan checker rejects it (not run again if
    it accepted the plan already: ``checked``), :class:`SpecError` if it has more ranks
    than the topology has GPUs or a route is missing."""
    return summarise(*_replay(data, topology, size_bytes, checked))


def plan_finish_s(data: Any, topology: Topology, size_bytes: int, *,
                  checked: bool = False) -> float:
    """:func:`simulate_plan`'s finish time alone: a compile judging a plan of a million
    link messages needs no per-link account of them."""
    return finish_of(*_replay(data, topology, size_bytes, checked))[0]


def _replay(data: Any, topology: Topology, size_bytes: int, checked: bool
            ) -> tuple[list[Task], list[TaskTimes], dict[str, float]]:
    """The plan's tasks, their times and each GPU's finish (:func:`simulate_plan`)."""
    report = None if checked else check_plan(data)
    if report is not None and not report.valid:
        more = f" (and {len(report.errors) - 1:,} more)" if len(report.errors) > 1 else ""
        raise VerificationError(f"not simulated, the plan checker rejects it: "
                                f"{report.errors[0]}{more}")
    plan = read_plan(data, [])
    if plan is None or len(plan.gpus) > topology.ngpus:
        raise SpecError(f"the plan has {len(plan.gpus) if plan else 0} ranks but topology "
                        f"{topology.name} has {topology.ngpus} GPUs")
    g0 = plan.gpus[0].chunks
    chunks = g0["o"] if plan.collective == "allgather" else g0["i"] or g0["o"]
    b = _Builder(plan, topology, size_bytes / max(chunks, 1))
    gpu_end: dict[str, list[int]] = defaultdict(list)
    for g in plan.gpus:
        for block in g.blocks:
            prev: list[int] = []
            for op in block.ops:
                for inner in (op.inner if op.name == "pipeline" else [op]):
                    prev = [b.op(inner, prev)]
            gpu_end[b.names[g.id]].extend(prev)
    b.resolve()
    times = run(topology, b.tasks)
    finish = {gpu: max((times[i].arrive_s for i in ends), default=0.0)
              for gpu, ends in gpu_end.items()}
    return b.tasks, times, finish
