"""The file of a grid AlltoAll schedule: its plan's steps as they are, groups of chunks
relayed in one step of ``cnt > 1``, which the passes (one step per chunk) cannot make
(:mod:`te_ccl.backends.scale.grid_alltoall`)."""

from __future__ import annotations

from te_ccl.backends.scale.grid_alltoall import (
    BUFFERS,
    METHOD,
    OPS,
    grid_alpha,
    grid_plan,
    grid_shape,
)
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
    if isinstance(plan, str) or int(plan.moves[:, 1].sum()) != len(schedule.transfers):
        return None
    op, buf = [Op(x) for x in OPS], [Buf(x) for x in BUFFERS]
    rows = plan.steps.tolist()
    blocks = plan.blocks.tolist()
    ends = [b[4] for b in blocks[1:]] + [len(rows)]
    n = coll.nranks
    per_rank: list[list[Threadblock]] = [[] for _ in range(n)]
    for (rank, send, recv, chan, first), end in zip(blocks, ends, strict=True):
        steps = tuple(Step(s, op[o], Slot(buf[sb], so), Slot(buf[db], do), c, di, ds, bool(h))
                      for s, (o, sb, so, db, do, c, di, ds, h) in enumerate(rows[first:end]))
        mine = per_rank[rank]
        mine.append(Threadblock(len(mine), send, recv, chan, steps))
    gpus = tuple(Gpu(v, n * k, n * k, int(plan.scratch[v]), tuple(tbs))
                 for v, tbs in enumerate(per_rank))
    return Program(name, proto, plan.nchannels, plan.nchunksperloop, n, coll.kind.value, False,
                   min_bytes, max_bytes, gpus)
