"""The file of a grid AlltoAll schedule: its plan's steps as they are, groups of chunks
relayed in one step of ``cnt > 1``, which the passes (one step per chunk) cannot make
(:mod:`te_ccl.backends.scale.grid_alltoall`)."""

from __future__ import annotations

from te_ccl.backends.scale.grid_alltoall import METHOD, grid_alpha, grid_plan, grid_shape
from te_ccl.lower.msccl.ir import Buf, Gpu, Op, Program, Slot, Step, Threadblock
from te_ccl.runtime_limits import RuntimeLimits
from te_ccl.schedule import Schedule

__all__ = ["grid_program"]


def grid_program(schedule: Schedule, name: str, proto: str, min_bytes: int, max_bytes: int,
                 runtime: RuntimeLimits) -> Program | None:
    """The program of ``schedule`` if the grid AlltoAll method made it (out of place, its
    plan's chunks moved as many times as the schedule moves them), else None."""
    coll, info = schedule.collective, schedule.info
    shape = grid_shape(schedule.topology)
    if not info.status.startswith(f"scale/{METHOD}:") or shape is None or coll.inplace:
        return None
    k = coll.chunks_per_rank
    plan = grid_plan(*shape, k, grid_alpha(schedule.topology, coll.chunk_bytes), runtime)
    if isinstance(plan, str) or int(plan.cnt.sum()) != len(schedule.transfers):
        return None
    n = coll.nranks
    gpus = tuple(
        Gpu(v, n * k, n * k, g.s_chunks, tuple(
            Threadblock(t, tb.send, tb.recv, tb.chan, tuple(
                Step(s, Op(st.op), Slot(Buf(st.srcbuf), st.srcoff),
                     Slot(Buf(st.dstbuf), st.dstoff), st.cnt, st.depid, st.deps, st.hasdep)
                for s, st in enumerate(tb.steps)))
            for t, tb in enumerate(g.threadblocks)))
        for v, g in enumerate(plan.gpus))
    return Program(name, proto, plan.nchannels, plan.nchunksperloop, n, coll.kind.value, False,
                   min_bytes, max_bytes, gpus)
