"""Lower a :class:`~te_ccl.schedule.Schedule` to an MSCCL++ execution plan (JSON).

Passes, one per module: :mod:`trace` (which GPU sends make each value a GPU receives,
sums formed in the switch fabric included), :mod:`program` (steps per GPU on slots
written once), :mod:`threadblocks` (lanes, thread blocks, semaphores, ``nop``),
:mod:`to_json` (the executor's format). Ranks in one box (``find_boxes``: the topology's
``box_gpus``, or GPU names ``b<i>.<gpu>``) talk over memory channels (CUDA IPC), ranks
in different boxes over port channels (the host proxy: IB or Ethernet). See docs/runtimes.md for the format version.
:mod:`boxes` writes one plan without a schedule: AllReduce across boxes of NVLS GPUs
(raced by the compile as :func:`box_candidate`, whose schedule lowers to that plan).
"""

from __future__ import annotations

from te_ccl.baselines.hierarchical import find_boxes
from te_ccl.lower.mscclpp.boxes import BOX_PLAN, box_allreduce_plan, box_candidate
from te_ccl.lower.mscclpp.program import SUPPORTED, build_program, plan_layout
from te_ccl.lower.mscclpp.threadblocks import assign_blocks, split_parts
from te_ccl.lower.mscclpp.to_json import plan_bytes, plan_dict
from te_ccl.lower.mscclpp.trace import trace_deliveries
from te_ccl.schedule import Schedule

__all__ = ["SUPPORTED", "lower_to_mscclpp", "box_allreduce_plan", "box_candidate"]


def lower_to_mscclpp(schedule: Schedule, *, name: str | None = None, min_bytes: int = 0,
                     max_bytes: int = 0) -> bytes:
    """The plan's bytes (deterministic). Raises :class:`~te_ccl.errors.TecclError` for a
    collective MSCCL++ plans do not cover or a relay outside the ranks, and
    :class:`~te_ccl.errors.RuntimeLimitError` where a thread block would exceed the
    executor's limits. :func:`box_candidate`'s schedule gives the box plan."""
    coll, topo = schedule.collective, schedule.topology
    title = name or f"{topo.name}-{coll.kind.value}"
    if schedule.info.backend == BOX_PLAN:
        return box_allreduce_plan(topo, name=title, min_bytes=min_bytes, max_bytes=max_bytes)
    plan_layout(coll)
    program = build_program(coll, trace_deliveries(schedule))
    gpus = [topo.gpu(r) for r in coll.ranks]
    box = {g: i for i, members in enumerate(find_boxes(topo, gpus)) for g in members}
    into = [x for g in gpus for x in topo.out_links(g) if topo.node(x.dst).nvls]
    parts = split_parts(schedule.chunk_bytes / min(x.bandwidth_Bps for x in into),
                        max(x.latency_s for x in into)) if into else 1
    plans = assign_blocks(program, [box[g] for g in gpus], parts)
    return plan_bytes(plan_dict(program, plans, name=title, min_bytes=min_bytes,
                                max_bytes=max_bytes))
