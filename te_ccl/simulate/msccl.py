"""Replay an MSCCL XML algorithm on a topology with the α-β model of the engine.

The file is read by the verifier's reader (:func:`te_ccl.verify.msccl.reader.read_msccl`);
rank ``r`` of the file is GPU ``topology.gpus[r]``. Each thread block runs its steps in
order; a step also waits for its dependency (``depid``/``deps``: a step of another
thread block of the same GPU) to be done. A sending step puts ``cnt`` chunks of
``size_bytes / nchunksperloop`` bytes on the route to its send peer (the direct link,
else the fastest path; store-and-forward at every node on the way) and is done when the
first link has carried them; a receiving step is done when the matching message
(the k-th send on the connection ``(channel, sender, receiver)`` meets the k-th receive)
has arrived; ``rcs``/``rrs``/``rrcs`` forward only after receiving. Local copies and
reductions take no time. Links serve messages first-come first-served.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from te_ccl.baselines.plan import route
from te_ccl.errors import SpecError, VerificationError
from te_ccl.simulate.engine import Task, run
from te_ccl.simulate.result import SimResult, summarise
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.model import Algo, Step, Threadblock
from te_ccl.verify.msccl.reader import read_msccl

__all__ = ["simulate_msccl", "msccl_tasks"]

_Key = tuple[int, int, int]  # (gpu, tb, step position)


class _Builder:
    def __init__(self, topology: Topology, algo: Algo, chunk_bytes: float) -> None:
        self.topo, self.algo, self.chunk_bytes = topology, algo, chunk_bytes
        self.graph = topology.graph()
        self.tasks: list[Task] = []
        self.done: dict[_Key, int] = {}
        self.sends: dict[tuple[int, int, int], list[int]] = defaultdict(list)  # conn -> last hop
        self.recvs: dict[tuple[int, int, int], list[int]] = defaultdict(list)  # conn -> join id
        self.gpu_done: dict[int, list[int]] = defaultdict(list)

    def add(self, task: Task) -> int:
        self.tasks.append(task)
        return len(self.tasks) - 1

    def message(self, gpu: int, peer: int, cnt: int, after: tuple[int, ...],
                label: str) -> tuple[int, int]:
        """Hops of one message; returns the first hop (the last is recorded for the receiver)."""
        path = route(self.topo, self.topo.gpu(gpu), self.topo.gpu(peer), via_gpus=True,
                     graph=self.graph)
        first = prev = -1
        for u, v in zip(path, path[1:], strict=False):
            prev = self.add(Task((u, v), cnt * self.chunk_bytes,
                                 after if prev < 0 else (prev,), label=label))
            first = prev if first < 0 else first
        return first, prev

    def step(self, gpu: int, tb: Threadblock, st: Step, prev: int | None) -> int:
        """Tasks of one step; fills its pre-allocated "done" join and returns its id."""
        label = f"r{gpu}/tb{tb.id}/s{st.position}"
        wait = tuple(x for x in (prev,) if x is not None)
        if st.depid >= 0:
            dep = self.done.get((gpu, st.depid, st.deps))
            if dep is None:
                raise VerificationError(f"{label}: depends on missing step "
                                        f"tb {st.depid} step {st.deps} of rank {gpu}")
            wait += (dep,)
        start = self.add(Task(None, 0, wait, label=label))
        recv = None
        if st.receives:
            recv = self.add(Task(None, 0, (start,), label=label + " recv"))
            self.recvs[(tb.chan, tb.recv, gpu)].append(recv)
        sent: tuple[int, ...] = ()
        if st.sends:
            first, last = self.message(gpu, tb.send, st.cnt, (recv if recv is not None else start,),
                                       label)
            self.sends[(tb.chan, gpu, tb.send)].append(last)
            sent = (first,)
        after = (start,) + ((recv,) if recv is not None else ())
        done = self.done[(gpu, tb.id, st.position)]
        self.tasks[done] = Task(None, 0, after, label=label + " done", after_sent=sent)
        return done

    def build(self) -> list[Task]:
        blocks = [(gpu.id, tb) for gpu in self.algo.gpus
                  for tb in sorted(gpu.threadblocks, key=lambda t: t.id)]
        for gpu, tb in blocks:  # a dependency may name a later thread block: allocate first
            for st in tb.steps:
                self.done[(gpu, tb.id, st.position)] = self.add(Task(None, 0))
        for gpu, tb in blocks:
            prev = None
            for st in tb.steps:
                prev = self.step(gpu, tb, st, prev)
            if prev is not None:
                self.gpu_done[gpu].append(prev)
        self._match()
        return self.tasks

    def _match(self) -> None:
        """k-th receive on a connection waits for the k-th message sent on it."""
        for conn, joins in self.recvs.items():
            msgs = self.sends.get(conn, [])
            if len(msgs) < len(joins):
                raise VerificationError(f"rank {conn[2]} receives {len(joins)} message(s) from "
                                        f"rank {conn[1]} on channel {conn[0]}, "
                                        f"{len(msgs)} sent")
            for j, m in zip(joins, msgs, strict=False):
                t = self.tasks[j]
                self.tasks[j] = Task(None, 0, t.after_all + (m,), label=t.label)


def msccl_tasks(algo: Algo, topology: Topology, size_bytes: int) -> tuple[list[Task], dict[int, list[int]]]:
    """Engine tasks of ``algo`` and, per rank, the tasks that end its thread blocks."""
    if algo.ngpus > topology.ngpus:
        raise SpecError(f"the algorithm has {algo.ngpus} GPUs, topology {topology.name} "
                        f"only {topology.ngpus}", key="ngpus")
    if algo.nchunksperloop <= 0:
        raise SpecError("nchunksperloop must be positive", key="nchunksperloop")
    b = _Builder(topology, algo, size_bytes / algo.nchunksperloop)
    return b.build(), dict(b.gpu_done)


def simulate_msccl(path_or_algo: str | Path | Algo, topology: Topology,
                   size_bytes: int) -> SimResult:
    """Simulate an MSCCL algorithm (file or parsed) for a ``size_bytes`` collective."""
    algo = path_or_algo if isinstance(path_or_algo, Algo) else read_msccl(path_or_algo)
    tasks, ends = msccl_tasks(algo, topology, size_bytes)
    times = run(topology, tasks)
    finish = {topology.gpu(r): max((times[i].arrive_s for i in ids), default=0.0)
              for r, ids in ends.items()}
    return summarise(tasks, times, finish)

