"""The file of a grid schedule: its plan's steps as they are, groups of chunks relayed in
one step of ``cnt > 1``, which the passes (one step per chunk) cannot make
(:mod:`te_ccl.backends.scale.grid_alltoall`, :mod:`te_ccl.backends.scale.grid_lines`)."""

from __future__ import annotations

from te_ccl.backends.scale import grid_alltoall, grid_lines
from te_ccl.backends.scale.grid import BUFFERS, OPS, GridPlan, grid_alpha, grid_shape
from te_ccl.lower.msccl.buffers import buffer_layout
from te_ccl.lower.msccl.ir import Buf, Gpu, Op, Program, Slot, Step, Threadblock
from te_ccl.runtime_limits import RuntimeLimits
from te_ccl.schedule import Schedule

__all__ = ["grid_program"]


def _plan(schedule: Schedule, runtime: RuntimeLimits) -> GridPlan | str | None:
    """The plan of the grid method that made ``schedule`` (None: none did; a str: why
    the plan does not fit ``runtime``)."""
    coll, status = schedule.collective, schedule.info.status
    shape = grid_shape(schedule.topology)
    if shape is None:
        return None
    alpha = grid_alpha(schedule.topology, coll.chunk_bytes)
    k = coll.chunks_per_rank
    if status.startswith(f"scale/{grid_alltoall.METHOD}:") and not coll.inplace:
        return grid_alltoall.grid_plan(*shape, k, alpha, runtime)
    if schedule.info.backend == grid_lines.BACKEND and \
            status.startswith(f"scale/{grid_lines.METHODS.get(coll.kind)}:"):
        return grid_lines.lines_plan(coll.kind, *shape, k, coll.inplace, alpha, runtime)
    return None


def grid_program(schedule: Schedule, name: str, proto: str, min_bytes: int, max_bytes: int,
                 runtime: RuntimeLimits) -> Program | None:
    """The program of ``schedule`` if a grid method made it (its plan's chunks moved as
    many times as the schedule moves them), else None."""
    coll = schedule.collective
    plan = _plan(schedule, runtime)
    if plan is None or isinstance(plan, str) or \
            int(plan.moves[:, 1].sum()) != len(schedule.transfers):
        return None
    op, buf = [Op(x) for x in OPS], [Buf(x) for x in BUFFERS]
    nop = OPS.index(Op.NOP)
    rows = plan.steps.tolist()
    blocks = plan.blocks.tolist()
    ends = [b[4] for b in blocks[1:]] + [len(rows)]
    n = coll.nranks
    layout = buffer_layout(coll)
    per_rank: list[list[Threadblock]] = [[] for _ in range(n)]
    for (rank, send, recv, chan, first), end in zip(blocks, ends, strict=True):
        steps = tuple(Step(s, op[o], None, None, c, di, ds, bool(h)) if o == nop else
                      Step(s, op[o], Slot(buf[sb], so), Slot(buf[db], do), c, di, ds, bool(h))
                      for s, (o, sb, so, db, do, c, di, ds, h) in enumerate(rows[first:end]))
        mine = per_rank[rank]
        mine.append(Threadblock(len(mine), send, recv, chan, steps))
    gpus = tuple(Gpu(v, layout.i_chunks, layout.o_chunks, int(plan.scratch[v]), tuple(tbs))
                 for v, tbs in enumerate(per_rank))
    return Program(name, proto, plan.nchannels, plan.nchunksperloop, n, coll.kind.value,
                   coll.inplace, min_bytes, max_bytes, gpus)
