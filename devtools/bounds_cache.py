"""Lower bounds for the benchmark: computed once per topology and collective, under a time limit.

:func:`te_ccl.bounds.lower_bound` is exact but can take seconds on large fabrics (the
AlltoAll LP). The benchmark computes it once per (topology, kind, ranks, root) in a worker
process with a time limit and rescales it to every size (:meth:`Bound.rescaled`: every
part is proportional to the buffer size but its fixed α seconds), so the part
that sets the bound (:attr:`ScaledBound.argument`) is chosen after rescaling — ``alpha_s``
at 1 KB, a bandwidth part at 1 GB. AlltoAll's bound is computed at the row's own size
instead (:data:`AT_OWN_SIZE`): its ``walk_window_s`` is 0 at 1 GB and may set the bound
of a small size, so a rescaled bound would be weaker than the one the compile reports.
The cache is held in memory for one run (nothing is
stored between runs) and keyed by the topology itself, its nodes and links, so two
fabrics of one name never share a bound. If the worker runs out of time, the bound falls
back to the cut of a single GPU (:func:`node_cut_s`: one set of the same formula, so a
valid but possibly weaker ``cut_s``) for AllGather, ReduceScatter and AllReduce (kind
``node-cut``), else to none.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass, field, replace

from te_ccl.bounds import Bound, lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.topology.model import Topology

__all__ = ["AT_OWN_SIZE", "ScaledBound", "Bounds", "node_cut_s"]

_REF = 10**9  # bytes at which a bound is computed before rescaling
# kinds with a part that does not rescale from _REF (AlltoAll's walk_window_s: 0 there)
AT_OWN_SIZE = frozenset({CollectiveKind.ALLTOALL})


@dataclass(frozen=True)
class ScaledBound:
    """A bound's parts (seconds per argument) and how they were found: ``exact`` (by
    :func:`lower_bound`), ``node-cut`` or ``none (timed out)``."""

    seconds: float | None
    parts: dict[str, float] = field(default_factory=dict)
    kind: str = "exact"
    fixed: dict[str, float] = field(default_factory=dict)  # Bound.fixed: what does not rescale

    @property
    def argument(self) -> str:
        """The part that sets the bound, by :attr:`te_ccl.bounds.Bound.argument`'s rule."""
        return Bound(self.seconds or 0.0, self.parts).argument


def node_cut_s(topology: Topology, collective: Collective) -> float:
    """The largest cut of one GPU ``v``: AllGather (N−1)·(M/N) / B_in(v) (the others' chunks
    enter ``v``), ReduceScatter the same over B_out(v), AllReduce M / min(B_in(v),
    B_out(v)) (every element of the sum enters ``v`` and leaves it, as in ``cut_s``)."""
    n, m = collective.nranks, collective.size_bytes
    gpus = [topology.gpu(r) for r in collective.ranks]

    def cut(incoming: bool, size: float) -> float:
        links = topology.in_links if incoming else topology.out_links
        return max(size / sum(k.bandwidth_Bps for k in links(g)) for g in gpus)

    if collective.kind is CollectiveKind.ALLREDUCE:
        return max(cut(True, m), cut(False, m))
    return cut(collective.kind is not CollectiveKind.REDUCESCATTER, (n - 1) * m / n)


class Bounds:
    """Cache of bounds at a reference size (at their own size for :data:`AT_OWN_SIZE`);
    ``get`` rescales to the collective's size."""

    def __init__(self, time_limit_s: float = 30.0) -> None:
        self.limit = time_limit_s
        self.cache: dict[tuple[Topology, CollectiveKind, tuple[int, ...], int | None, int],
                         ScaledBound] = {}

    def _compute(self, topology: Topology, ref: Collective) -> ScaledBound:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(1) as pool:
            job = pool.apply_async(lower_bound, (topology, ref))
            try:
                b = job.get(self.limit)
                return ScaledBound(b.seconds, dict(b.parts), fixed=dict(b.fixed))
            except multiprocessing.TimeoutError:
                pool.terminate()
        if ref.kind in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                        CollectiveKind.ALLREDUCE):
            return ScaledBound(None, {"cut_s": node_cut_s(topology, ref)}, "node-cut")
        return ScaledBound(None, {}, "none (timed out)")

    def get(self, topology: Topology, collective: Collective) -> ScaledBound:
        size = collective.size_bytes if collective.kind in AT_OWN_SIZE else _REF
        key = (topology, collective.kind, collective.ranks, collective.root, size)
        if key not in self.cache:
            self.cache[key] = self._compute(topology, replace(collective, size_bytes=size,
                                                              chunks_per_rank=1))
        ref = self.cache[key]
        parts = Bound(0.0, ref.parts, ref.fixed).rescaled(collective.size_bytes / size)
        return ScaledBound(max(parts.values()) if parts else None, parts, ref.kind)
