"""The file of a grid schedule: its plan's steps as they are, groups of chunks relayed in
one step of ``cnt > 1``, which the passes (one step per chunk) cannot make
(:mod:`te_ccl.backends.scale.grid_alltoall`, :mod:`te_ccl.backends.scale.grid_lines`).

Written as a stream, a GPU's lines are formatted straight from the plan's rows, as
:func:`~te_ccl.lower.msccl.to_xml.gpu_xml` prints them: half a million steps at 256 GPUs
cost more to build as :class:`Step` objects than to print."""

from __future__ import annotations

from collections.abc import Iterator

from te_ccl.backends.scale import grid_alltoall, grid_lines
from te_ccl.backends.scale.grid import BUFFERS, OPS, GridPlan, grid_alpha, grid_shape
from te_ccl.lower.msccl.buffers import buffer_layout
from te_ccl.lower.msccl.ir import Buf, Gpu, Op, Program, Slot, Step, Threadblock
from te_ccl.runtime_limits import RuntimeLimits
from te_ccl.schedule import Schedule

__all__ = ["grid_program"]

_SRC, _DST = (*BUFFERS, "i"), (*BUFFERS, "o")  # a nop's buffers (code −1) print as i, o
_STEP = ('      <step s="%d" type="%s" srcbuf="%s" srcoff="%d" dstbuf="%s" dstoff="%d" '
         'cnt="%d" depid="%d" deps="%d" hasdep="%d"/>\n')

_Rows = list[list[int]]
_Block = tuple[int, int, int, int, _Rows]  # rank, send peer, receive peer, channel, steps


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


def _blocks(plan: GridPlan) -> Iterator[_Block]:
    """The plan's thread blocks in order, each with its step rows."""
    rows = plan.steps.tolist()
    blocks = plan.blocks.tolist()
    ends = [b[4] for b in blocks[1:]] + [len(rows)]
    for (rank, send, recv, chan, first), end in zip(blocks, ends, strict=True):
        yield rank, send, recv, chan, rows[first:end]


def _gpus(plan: GridPlan, schedule: Schedule) -> list[Gpu]:
    """Every GPU of ``plan`` as :class:`Gpu` objects."""
    op, buf = [Op(x) for x in OPS], [Buf(x) for x in BUFFERS]
    nop = OPS.index(Op.NOP)
    n = schedule.collective.nranks
    per_rank: list[list[Threadblock]] = [[] for _ in range(n)]
    for rank, send, recv, chan, rows in _blocks(plan):
        steps = tuple(Step(s, op[o], None, None, c, di, ds, bool(h)) if o == nop else
                      Step(s, op[o], Slot(buf[sb], so), Slot(buf[db], do), c, di, ds, bool(h))
                      for s, (o, sb, so, db, do, c, di, ds, h) in enumerate(rows))
        mine = per_rank[rank]
        mine.append(Threadblock(len(mine), send, recv, chan, steps))
    layout = buffer_layout(schedule.collective)
    return [Gpu(v, layout.i_chunks, layout.o_chunks, int(plan.scratch[v]), tuple(tbs))
            for v, tbs in enumerate(per_rank)]


def _gpus_xml(plan: GridPlan, schedule: Schedule) -> list[bytes]:
    """Every GPU of ``plan`` as its ``<gpu>`` element's bytes."""
    layout = buffer_layout(schedule.collective)
    n = schedule.collective.nranks
    out: list[list[str]] = [[] for _ in range(n)]
    tbs = [0] * n
    for rank, send, recv, chan, rows in _blocks(plan):
        lines = out[rank]
        lines.append(f'    <tb id="{tbs[rank]}" send="{send}" recv="{recv}" chan="{chan}">\n')
        tbs[rank] += 1
        lines.extend(_STEP % (s, OPS[o], _SRC[sb], so, _DST[db], do, c, di, ds, h != 0)
                     for s, (o, sb, so, db, do, c, di, ds, h) in enumerate(rows))
        lines.append("    </tb>\n")
    return [(f'  <gpu id="{v}" i_chunks="{layout.i_chunks}" o_chunks="{layout.o_chunks}" '
             f's_chunks="{int(plan.scratch[v])}">\n' + "".join(lines) + "  </gpu>\n").encode()
            for v, lines in enumerate(out)]


def grid_program(schedule: Schedule, name: str, proto: str, min_bytes: int, max_bytes: int,
                 runtime: RuntimeLimits, *, text: bool = False
                 ) -> tuple[Program, list[Gpu] | list[bytes]] | None:
    """(the ``<algo>`` header, without GPUs; every GPU, as :class:`Gpu` or, if ``text``,
    its XML bytes) of ``schedule`` if a grid method made it (its plan's chunks moved as
    many times as the schedule moves them), else None."""
    coll = schedule.collective
    plan = _plan(schedule, runtime)
    if plan is None or isinstance(plan, str) or \
            int(plan.moves[:, 1].sum()) != len(schedule.transfers):
        return None
    head = Program(name, proto, plan.nchannels, plan.nchunksperloop, coll.nranks,
                   coll.kind.value, coll.inplace, min_bytes, max_bytes, ())
    return head, _gpus_xml(plan, schedule) if text else _gpus(plan, schedule)
