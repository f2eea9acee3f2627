"""Metrics of one schedule: times, algbw/busbw (nccl-tests' conventions), buffers, bound ratio.

``algbw = size_bytes / time`` and ``busbw = algbw × Collective.busbw_factor``, with
``size_bytes`` as in the collective's docstring (nccl-tests' "size" of each collective),
so the numbers compare with what users measure. The busbw factor counts the bytes GPUs
relay; where switches reduce or multicast (:func:`in_switch`) it describes no link, so
busbw is None there. ``time`` is the simulated finish time
when a simulation is given (the same replay for teccl and the baselines), else the
schedule's own epoch finish time.

Buffer per GPU: the output buffer slots it owns (chunks it must end with, and the chunks
of its own data that stay in its output, as MSCCL lays them out) plus scratch: distinct
chunks it receives only to relay. Both in bytes.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.schedule import Schedule, Transfer
>>> from te_ccl.topology import Link, Node, Topology
>>> t = Topology.build("p", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
>>> s = Schedule(t, Collective(CollectiveKind.ALLGATHER, 2000, (0, 1)), 1e-6,
...              (Transfer(0, "a", "b", 0, 1), Transfer(1, "b", "a", 0, 1)))
>>> m = schedule_metrics(s, bound_s=1e-6)
>>> m.algbw_GBps, m.busbw_GBps, m.bound_ratio, m.buffer_bytes["a"]
(2.0, 1.0, 1.0, 2000)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from te_ccl.schedule import LazyTransfers, Schedule
from te_ccl.simulate.result import SimResult

__all__ = ["Metrics", "schedule_metrics", "buffer_bytes", "scratch_bytes", "buffer_summary",
           "bandwidths", "in_switch", "busbw_factor"]


@dataclass(frozen=True)
class Metrics:
    """Everything the report prints about one schedule (times in seconds, bandwidth GB/s)."""

    topology: str
    collective: str
    ngpus: int
    size_bytes: int
    backend: str
    solver_time_s: float
    predicted_s: float
    simulated_s: float | None
    time_s: float
    algbw_GBps: float | None
    busbw_GBps: float | None
    lower_bound_s: float | None
    bound_ratio: float | None
    optimal: bool
    buffer_bytes: dict[str, int]

    @property
    def max_buffer_bytes(self) -> int:
        return max(self.buffer_bytes.values(), default=0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["max_buffer_bytes"] = self.max_buffer_bytes
        return d


def bandwidths(size_bytes: int, time_s: float, busbw_factor: float | None
               ) -> tuple[float | None, float | None]:
    """``(algbw, busbw)`` in GB/s (10⁹ bytes/s, as nccl-tests); None for a zero time, and
    busbw None without a factor."""
    if time_s <= 0:
        return None, None
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * busbw_factor if busbw_factor is not None else None


def in_switch(schedule: Schedule) -> bool:
    """Whether a switch reduces a chunk or sends it out on more links than it came in on
    (never without switches: the transfers, built lazily for a large schedule, are not
    read)."""
    is_gpu = {n.name: n.is_gpu for n in schedule.topology.nodes}
    if all(is_gpu.values()):
        return False
    ins: dict[tuple[int, str], int] = defaultdict(int)
    outs: dict[tuple[int, str], int] = defaultdict(int)
    for t in schedule.transfers:
        if not is_gpu[t.dst]:
            if t.op == "reduce":
                return True
            ins[t.chunk, t.dst] += 1
        if not is_gpu[t.src]:
            outs[t.chunk, t.src] += 1
    return any(n > ins[k] for k, n in outs.items())


def busbw_factor(schedule: Schedule) -> float | None:
    """nccl-tests' busbw factor of the collective, None for an :func:`in_switch` schedule."""
    return None if in_switch(schedule) else schedule.collective.busbw_factor


def _slots(schedule: Schedule) -> tuple[dict[str, set[int]], dict[str, int]]:
    """Per GPU: its output slots, and how many chunks it receives only to relay (scratch)."""
    topo, coll = schedule.topology, schedule.collective
    slots: dict[str, set[int]] = defaultdict(set)
    wanted: dict[str, set[int]] = defaultdict(set)
    for c in coll.chunks():
        for r in c.destinations + (() if c.reduce else c.sources):
            slots[topo.gpu(r)].add(c.out_index)
            wanted[topo.gpu(r)].add(c.id)
    gpus = set(topo.gpus)
    transfers = schedule.transfers
    arrivals = (transfers.arrivals() if isinstance(transfers, LazyTransfers)
                and not transfers.built else None)
    if arrivals is not None:  # millions of chunk-hops: counted on their arrays, never built
        return slots, _relayed(gpus, wanted, *arrivals)
    scratch: dict[str, set[int]] = defaultdict(set)
    for t in transfers:
        if t.dst in gpus and t.chunk not in wanted[t.dst]:
            scratch[t.dst].add(t.chunk)
    return slots, {g: len(chunks) for g, chunks in scratch.items()}


def _relayed(gpus: set[str], wanted: dict[str, set[int]], names: tuple[str, ...],
             dst: np.ndarray, chunk: np.ndarray) -> dict[str, int]:
    """Per GPU, the distinct chunks that arrive there (``names[dst[i]]`` gets ``chunk[i]``)
    and that it does not want: the loop of :func:`_slots` as sorted keys."""
    n = len(names)
    keys = np.asarray(chunk, dtype=np.int64) * n + np.asarray(dst, dtype=np.int64)
    keys.sort()  # a sort, not np.unique's hash table: ten times faster on millions of keys
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    own = np.fromiter((c * n + i for i, g in enumerate(names) if g in gpus
                       for c in wanted.get(g, ())), dtype=np.int64)
    keys = keys[~np.isin(keys, own, assume_unique=True)]
    counts = np.bincount(keys % n, minlength=n)
    return {g: int(counts[i]) for i, g in enumerate(names) if g in gpus and counts[i]}


def _buffers(schedule: Schedule) -> tuple[dict[str, float], dict[str, float]]:
    """Per participating GPU: the bytes it holds when done, and those of relay scratch."""
    slots, scratch = _slots(schedule)
    gpus = [schedule.topology.gpu(r) for r in schedule.collective.ranks]
    chunk = schedule.chunk_bytes
    return ({g: (len(slots[g]) + scratch.get(g, 0)) * chunk for g in gpus},
            {g: scratch.get(g, 0) * chunk for g in gpus})


def buffer_bytes(schedule: Schedule) -> dict[str, int]:
    """Bytes each participating GPU holds when done: output slots plus relay scratch."""
    return _buffers(schedule)[0]


def scratch_bytes(schedule: Schedule) -> dict[str, int]:
    """Bytes of relay scratch each participating GPU needs (MSCCL's ``s_chunks``)."""
    return _buffers(schedule)[1]


def buffer_summary(schedule: Schedule) -> dict[str, Any]:
    """The buffer keys of ``teccl compile --json``: per GPU and the largest of each."""
    held, relayed = _buffers(schedule)
    total = {g: round(b) for g, b in held.items()}  # whole bytes: chunks
    scratch = {g: round(b) for g, b in relayed.items()}  # may be fractional
    return {"buffer_bytes": total, "max_buffer_bytes": max(total.values(), default=0),
            "scratch_bytes": scratch, "peak_scratch_bytes": max(scratch.values(), default=0)}


def schedule_metrics(schedule: Schedule, *, sim: SimResult | None = None,
                     bound_s: float | None = None) -> Metrics:
    """Metrics of ``schedule``; pass ``sim`` to time it by the simulator, ``bound_s`` for the ratio."""
    c = schedule.collective
    predicted = schedule.finish_time_s
    time_s = sim.finish_time_s if sim is not None else predicted
    algbw, busbw = bandwidths(c.size_bytes, time_s, busbw_factor(schedule))
    ratio = time_s / bound_s if bound_s and time_s > 0 else None
    return Metrics(schedule.topology.name, c.kind.value, c.nranks, c.size_bytes,
                   schedule.info.backend, schedule.info.solver_time_s, predicted,
                   sim.finish_time_s if sim is not None else None, time_s, algbw, busbw,
                   bound_s, ratio, schedule.info.optimal, buffer_bytes(schedule))
