"""The MSCCL++ lowering as its pass list: trace, program, thread blocks, JSON (the box
plan, which follows no schedule, is written whole by :mod:`boxes`)."""

from __future__ import annotations

from te_ccl.lower.mscclpp.boxes import BOX_PLAN, box_allreduce_plan
from te_ccl.lower.mscclpp.program import build_program, plan_layout
from te_ccl.lower.mscclpp.threadblocks import plan_blocks
from te_ccl.lower.mscclpp.to_json import plan_bytes, plan_dict
from te_ccl.lower.mscclpp.trace import trace_deliveries
from te_ccl.schedule import Schedule

__all__ = ["lower_to_mscclpp"]


def lower_to_mscclpp(schedule: Schedule, *, name: str | None = None, min_bytes: int = 0,
                     max_bytes: int = 0) -> bytes:
    """The plan's bytes (deterministic). Raises :class:`~te_ccl.errors.TecclError` for a
    collective MSCCL++ plans do not cover or a relay outside the ranks, and
    :class:`~te_ccl.errors.RuntimeLimitError` where a thread block would exceed the
    executor's limits. :func:`~te_ccl.lower.mscclpp.boxes.box_candidate`'s schedule
    gives the box plan."""
    coll, topo = schedule.collective, schedule.topology
    title = name or f"{topo.name}-{coll.kind.value}"
    if schedule.info.backend == BOX_PLAN:
        return box_allreduce_plan(topo, name=title, min_bytes=min_bytes, max_bytes=max_bytes)
    plan_layout(coll)
    program = build_program(coll, trace_deliveries(schedule))
    return plan_bytes(plan_dict(program, plan_blocks(schedule, program), name=title,
                                min_bytes=min_bytes, max_bytes=max_bytes))
