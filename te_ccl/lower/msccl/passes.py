"""The lowering's pass list and the loop that fits a schedule into the runtime's limits.

The pipeline, one pass per module, each leaving a valid intermediate form:

1. :mod:`collapse_switches` — transfers → GPU-to-GPU edges (switch paths collapsed),
   then :mod:`retime` — the edges timed by the schedule's replay instead of its epochs
   (what the file is measured against, and how the runtime runs: as soon as it can),
   then, with ``merge`` (a mode of :data:`~te_ccl.lower.msccl.merge.MODES`), :mod:`merge`
   — runs of edges on one connection whose slots are consecutive become one step of
   several chunks (``cnt > 1``), scratch laid out for it;
2. :mod:`instructions` — per-GPU instructions in time order on ``i``/``o``/``s`` slots
   (:mod:`buffers`), and the receive/send pairs that can be fused;
3. :mod:`channels` — a channel per edge keeping FIFO order and depth on both sides of a
   connection and every thread block within its step budget (deadlock-free by
   construction: replaying all steps in schedule time order never blocks);
4. :mod:`threadblocks` — thread blocks per (channel, peer), steps in time order (where
   the edges carry the replay's times, a fusion pairing whose thread block would take
   one of its plain receives late, behind a send still on the link, is given up first);
5. :mod:`dependencies` — ``depid``/``deps``/``hasdep`` and ``nop`` steps;
6. :mod:`to_xml` — the bytes, laid out for the runtime's parser, one GPU at a time.

Every pass is near-linear in the number of transfers (millions at 1024 GPUs). The
channel pass keeps every thread block within a budget of data steps that leaves
``NOP_HEADROOM`` of ``max_steps`` for the ``nop`` steps of pass 5 that it does not count
itself (it counts one per send of a value received before it, which waits for that
value and for the link's previous send, and one per fused step whose receive writes a
slot another receive wrote, which waits for that write and the link). Only if those
still push a thread block over the limit is it rerun, with a budget smaller by the worst
excess of any thread block (at least that headroom again). If a rank needs more elements
than the runtime's reader holds (``max_elements`` of its
:class:`~te_ccl.runtime_limits.RuntimeLimits`), those ranks give up their
link order (no ``nop`` waits for a link's previous send); if ranks are still over, the
channel pass is rerun favouring the fusions of those ranks, even those that delay
steps; if ranks are still over (or more than a quarter of them were), once more with
every fusion on every rank, the ranks keeping their link order where they still fit
(fewest steps, the schedule's timing given up, and the program's ``notes`` say so).
An edge that fits no channel under the step budget while the timing is kept (each
relayed plain send counting its ``nop``) also gets that last run. A schedule cut into
sub-chunks (``SolveInfo.subchunks``) never gets it: it raises, to be solved again with
fewer (:func:`~te_ccl.compiler.render.render_fitting`). What still
does not fit raises :class:`~te_ccl.errors.RuntimeLimitError`, never a file the runtime
would refuse.

Time: every pass observes the deadline of the compile under way
(:mod:`te_ccl.deadline`), raising
:class:`~te_ccl.deadline.TimeLimitReached` (exit 3) once it has passed, and
``progress`` hears which pass runs (and which GPU the last pass has reached). From
:data:`FORK_FROM` edges, the instructions and fusions of pass 2 and passes 4–6
(independent per GPU) are dealt over forked processes, one per core
(:mod:`te_ccl.background`); the bytes are the same. Pass 3 runs in one process alone
unless it runs in two halves at once (:func:`split_halves`). From
:data:`CHILD_FROM` transfers the whole lowering runs in a forked process, which leaves
without freeing its millions of objects. Below, a fork costs more than it saves: the
parent's share of dealing out and gathering the parts is about the whole lowering's work
in one process.

Buffering: a connection holds :meth:`~te_ccl.runtime_limits.RuntimeLimits.outstanding_sends`
of the file's protocol (2 under Simple), and the channel pass keeps every connection
within that depth. Timing: the file keeps the schedule's timing where the runtime runs
it as the schedule says: a send waits for the previous send on its out-link (the link's
order, also where a switch's peers share it), a receive is fused into a send only where
no other step of the GPU would wait for that send to leave, and a fused step holds its
connection's slot until its send has left (:mod:`instructions`, :mod:`channels`). Ranks
rerun for the element limit may keep fusions that do delay steps; the program's
``notes`` say so.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from functools import partial

import numpy as np

from te_ccl.background import WORTH_FORKING, left_to_exit, told, workers
from te_ccl.collective.model import Collective
from te_ccl.deadline import check
from te_ccl.errors import RuntimeLimitError, SpecError
from te_ccl.lower.msccl.buffers import Layout, buffer_layout
from te_ccl.lower.msccl.channels import ChannelsExhausted
from te_ccl.lower.msccl.collapse_switches import Edge, collapse_switches
from te_ccl.lower.msccl.grid import grid_program
from te_ccl.lower.msccl.instructions import first_receipts
from te_ccl.lower.msccl.ir import LOWERING, Program
from te_ccl.lower.msccl.merge import MODES, merged_edges, one_call_up_to
from te_ccl.lower.msccl.parallel import (
    NopOverflow,
    Progress,
    assign_edges,
    deal,
    gpus_in_part,
    in_parts,
    instructions_and_fusions,
    peer_sets,
    quiet,
    split_halves,
)
from te_ccl.lower.msccl.retime import replay_timed
from te_ccl.lower.msccl.to_xml import algo_close, algo_open
from te_ccl.nogc import paused_gc
from te_ccl.outputs import write_atomic
from te_ccl.runtime_limits import MSCCL, PROTOCOLS, RuntimeLimits
from te_ccl.schedule import Schedule

__all__ = ["StepsExhausted", "build_program", "lower_to_msccl", "write_msccl"]

NOP_HEADROOM = 1 / 16  # of max_steps, kept for dependency nops
FORK_FROM = 40_000  # edges: from here the per-GPU passes are dealt over forked processes
CHILD_FROM = FORK_FROM  # transfers: from here the lowering runs in a forked process
#                         (:func:`~te_ccl.background.told`), which never frees its objects


def lower_to_msccl(schedule: Schedule, *, name: str | None = None, min_bytes: int = 0,
                   max_bytes: int = 0, proto: str | None = None, max_steps: int = 64,
                   notes: list[str] | None = None, progress: Progress = quiet,
                   runtime: RuntimeLimits = MSCCL, merge: str | None = None) -> bytes:
    """The MSCCL XML of ``schedule`` (deterministic: same schedule, same bytes).

    ``max_bytes=0`` means no upper size limit; ``proto`` defaults to the collective's.
    ``notes``, if given, receives the program's notes (where the file cannot keep the
    schedule's timing); ``progress`` hears what the lowering is doing; ``runtime``: whose
    executor loads the file (the MSCCL executor's limits, or RCCL's), which every pass
    keeps to. Raises :class:`TecclError` for what MSCCL cannot express (in-switch
    reduction, relays through GPUs outside the collective), and its subclass
    :class:`RuntimeLimitError` for what the runtime cannot hold (the MSCCL executor's:
    more than 32 channels, 64 steps per thread block, 1024 thread blocks, 128 waited
    thread blocks or 4096 elements per rank; RCCL's: 64 thread blocks per rank);
    :class:`~te_ccl.deadline.TimeLimitReached` once the compile's deadline passes.
    ``merge``: steps carry several chunks where their slots allow, in that mode of
    :mod:`merge` (None: one chunk a step), which the caller keeps where the file's replay
    is faster.

    >>> from te_ccl.collective import Collective, CollectiveKind
    >>> from te_ccl.schedule import Transfer
    >>> from te_ccl.topology import Link, Node, Topology
    >>> topo = Topology.build("pair", [Node("a"), Node("b")],
    ...                       [Link("a", "b", 1e9), Link("b", "a", 1e9)])
    >>> coll = Collective(CollectiveKind.ALLGATHER, 2000, (0, 1), inplace=True)
    >>> moves = (Transfer(0, "a", "b", 0, 1), Transfer(1, "b", "a", 0, 1))
    >>> xml = lower_to_msccl(Schedule(topo, coll, 1e-6, moves)).decode().splitlines()
    >>> print(xml[2]); print(xml[4].strip())
      <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0">
    <step s="0" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    """
    options = {"name": name, "min_bytes": min_bytes, "max_bytes": max_bytes, "proto": proto,
               "max_steps": max_steps, "runtime": runtime, "merge": merge}
    if len(schedule.transfers) < CHILD_FROM:
        data, said = _xml(progress, schedule, options)
    else:  # its millions of objects are left to the child's exit, not freed one by one
        data, said = told(_xml, progress, schedule, options)
    if notes is not None:
        notes.extend(said)
    return data


def _xml(tell: Progress, schedule: Schedule, options: dict) -> tuple[bytes, tuple[str, ...]]:
    """The bytes and notes of :func:`lower_to_msccl`; ``tell`` hears the progress."""
    with paused_gc():
        head, gpus = _lower(schedule, **options, stream=True, progress=tell)
        return b"".join([algo_open(head, provenance=_provenance(schedule)).encode(), *gpus,
                         algo_close().encode()]), head.notes


def _provenance(schedule: Schedule) -> tuple[str, int] | None:
    """The topology and size ``teccl simulate FILE`` reads back, for a collective over every
    GPU in order (a rank subset needs its ranks, which the comment does not carry)."""
    coll = schedule.collective
    if coll.ranks != tuple(range(schedule.topology.ngpus)):
        return None
    return schedule.topology.name, coll.size_bytes


def write_msccl(schedule: Schedule, path: str | os.PathLike, **options) -> bytes:
    """Lower and write the XML to ``path`` atomically (``"-"``: stdout); returns the bytes."""
    data = lower_to_msccl(schedule, **options)
    write_atomic(path, data)
    return data


def build_program(schedule: Schedule, *, name: str | None = None, min_bytes: int = 0,
                  max_bytes: int = 0, proto: str | None = None, max_steps: int = 64,
                  runtime: RuntimeLimits = MSCCL, merge: str | None = None) -> Program:
    """The :class:`Program` IR of ``schedule`` (see :func:`lower_to_msccl`)."""
    with paused_gc():
        head, gpus = _lower(schedule, name=name, min_bytes=min_bytes, max_bytes=max_bytes,
                            proto=proto, max_steps=max_steps, stream=False,
                            progress=quiet, runtime=runtime, merge=merge)
        return replace(head, gpus=tuple(gpus))




class StepsExhausted(RuntimeLimitError):
    """Even one data step per thread block overflows ``max_steps`` once its dependency
    nops are added (a tight limit and a step that waits on many thread blocks)."""


def _lower(schedule: Schedule, *, name: str | None, min_bytes: int, max_bytes: int,
           proto: str | None, max_steps: int, stream: bool, progress: Progress,
           runtime: RuntimeLimits, merge: str | None = None, epochs: bool = False
           ) -> tuple[Program, list]:
    """The ``<algo>`` header (no GPUs) and every GPU: as XML bytes if ``stream`` (so that
    only one GPU's steps exist at a time), else as :class:`Gpu`, within ``runtime``'s
    limits.

    Edges are timed by the schedule's replay unless ``epochs``; where no channels hold
    them so, by the epochs: the replay sends a leaf's pieces at once and queues them in
    a switch, more than a connection's FIFOs hold (a pipelined Reduce over NVSwitch),
    where the epochs pace them.

    Where the runtime allows fewer thread blocks per GPU than ``depid`` can name (RCCL:
    64), every thread block is counted as waited for, so the channel pass keeps a GPU's
    thread blocks (one left for its local copies) within the runtime's by construction."""
    coll = schedule.collective
    proto = proto or coll.proto
    _check_options(proto, merge, min_bytes, max_bytes)
    grid = grid_program(schedule, _name(name, schedule), proto, min_bytes, max_bytes, runtime,
                        text=stream)
    if grid is not None:  # groups relayed in one step each: the plan's steps as they are
        return grid
    progress(f"lowering: {len(schedule.transfers)} transfers to GPU-to-GPU edges")
    epoch_timed = collapse_switches(schedule)
    edges = epoch_timed if epochs else replay_timed(epoch_timed, schedule)
    split = edges is not epoch_timed  # thread blocks are split by the replay's times only
    edges, layout, served, merged = _merged(edges, coll, proto, min_bytes, max_bytes,
                                            runtime, merge)
    by_epochs = partial(_lower, schedule, name=name, min_bytes=min_bytes, max_bytes=max_bytes,
                        proto=proto, max_steps=max_steps, stream=stream, progress=progress,
                        runtime=runtime, merge=merge, epochs=True)
    check(LOWERING)
    if len(edges) >= WORTH_FORKING:  # below, the channel pass finds out in a second
        _check_steps(edges, coll.nranks, runtime)
    progress(f"lowering: instructions of {coll.nranks} GPUs")
    base, found = instructions_and_fusions(edges, layout,
                                workers() if len(edges) >= FORK_FROM else 1)
    first = first_receipts(edges)  # the same for every rerun of the channel pass
    headroom = max(1, int(max_steps * NOP_HEADROOM))
    depth = runtime.outstanding_sends(proto)
    # every thread block counted (sending ones too) where they are fewer than depid names
    capped = runtime.max_threadblocks <= runtime.waitable
    waitable = min(runtime.waitable, runtime.max_threadblocks - 1)
    channels = runtime.max_channels
    full = max_steps - headroom if max_steps > 2 * headroom else max_steps
    budget = full
    favour: frozenset[int] = frozenset()
    timed, why = True, ""  # why the timing is given up (for the notes)
    waited = True  # sending thread blocks are waited for: a send waits for the link's last one
    # a schedule cut into sub-chunks is solved again with fewer where it does not fit
    # (render.render_fitting), which keeps its timing: it never gives the timing up
    refit = schedule.info.subchunks > 1
    peers: dict[int, set[int]] | None = None  # where GPUs are dealt over forked processes
    while budget > 0:
        candidates = [f for f in found if not f.delays or not timed or f.recv.gpu in favour]
        progress(f"lowering: channels for {len(edges)} edges ({len(candidates)} fusions to "
                 "try)")
        halves = split_halves(edges, candidates, coll.nranks,
                              runtime.step_room(coll.nranks))
        try:
            chan, fusions, delaying = assign_edges(edges, candidates, halves, budget, waited,
                                                   depth, favour, timed, split, first,
                                                   channels, waitable)
        except ChannelsExhausted as e:
            steps_limit = (f"at most {max_steps} steps per thread block within "
                           f"{channels} channels"
                           + (f" and {runtime.max_threadblocks} thread blocks per GPU"
                              if capped else ""))
            if not timed and waited and not refit and not capped:
                # last: count only the receiving thread blocks as waited for, so a GPU
                # can have one for each of its 71 peers each way (an AlltoAll over one
                # switch); where the dependencies need more, add_dependencies refuses it
                waited = False
                continue
            if not timed and not refit and split:
                return by_epochs()
            if not timed or refit:
                raise ChannelsExhausted(f"{e}: cannot keep {steps_limit}") from None
            # fewest steps; the link-order nops are not counted, so the cuts made for
            # them do not apply
            timed, why, budget = False, f"to fit {steps_limit}", full
            continue
        forks = workers() if stream and len(edges) >= FORK_FROM else 1
        if forks > 1 and peers is None:
            peers = peer_sets(edges)
        parts = deal(sorted(base), forks)
        gpus_of = partial(gpus_in_part, base=base, fusions=fusions, peers=peers, chan=chan,
                          layout=layout, budget=budget, max_steps=max_steps, timed=timed,
                          stream=stream, nranks=coll.nranks, runtime=runtime)
        try:
            gpus, over, loose = in_parts(gpus_of, parts, progress)
        except NopOverflow as e:  # the channel pass counts data steps, not the nops
            budget -= max(e.excess, headroom)
            continue
        except RuntimeLimitError:  # the dependencies of unwaited sending thread blocks
            if waited or refit or not split:
                raise
            return by_epochs()
        if refit and (over or loose):  # favouring ranks or giving up link order loses time
            some = over or loose
            raise RuntimeLimitError(
                f"{len(some)} rank(s) need more than {runtime.max_elements} XML elements (the "
                f"runtime's reader limit), e.g. rank position {min(some)}, unless the file "
                "gives up the schedule's timing; fewer sub-chunks per chunk would fit")
        if not over:
            left_to_exit(epoch_timed, edges, base, found, first, candidates, chan, fusions)
            nchannels = 1 + max(chan.values(), default=0)
            return Program(_name(name, schedule), proto, nchannels, layout.nchunksperloop,
                           coll.nranks, coll.kind.value, coll.inplace, min_bytes, served,
                           (), merged + _notes(favour, timed, delaying, why, len(loose),
                                               coll.nranks, runtime.max_elements)), gpus
        del gpus
        # favouring is for a few ranks: favouring a quarter of them would favour none
        last = bool(favour) or len(over) > max(1, coll.nranks // 4)
        if not timed:
            raise RuntimeLimitError(
                f"{len(over)} rank(s) need more than {runtime.max_elements} XML elements (the "
                f"runtime's reader limit), e.g. rank position {min(over)}, even with every "
                "fusion made")
        why = f"to fit the runtime's reader limit of {runtime.max_elements} elements"
        if last:  # every fusion on every rank
            timed, favour = False, frozenset()
        else:  # rerun favouring the ranks over the limit
            favour = frozenset(over)
    raise StepsExhausted(f"cannot fit the schedule into {max_steps} steps per thread block "
                         "(the nops of its dependencies alone exceed it)")


def _check_options(proto: str, merge: str | None, min_bytes: int, max_bytes: int) -> None:
    """Refuse a protocol, merge mode or size range the lowering cannot write."""
    if proto not in PROTOCOLS:
        raise SpecError(f"expected one of {', '.join(PROTOCOLS)}, got {proto!r}", key="proto")
    if merge is not None and merge not in MODES:
        raise SpecError(f"expected one of {', '.join(MODES)}, got {merge!r}", key="merge")
    if min_bytes < 0 or max_bytes < 0 or (max_bytes and max_bytes < min_bytes):
        raise SpecError(f"bad size range [{min_bytes}, {max_bytes}]", key="maxBytes")


def _merged(edges: tuple[Edge, ...], coll: Collective, proto: str, min_bytes: int,
            max_bytes: int, runtime: RuntimeLimits, merge: str | None
            ) -> tuple[tuple[Edge, ...], Layout, int, tuple[str, ...]]:
    """The merge pass: (edges, buffer layout, the file's maxBytes, why if not the one
    asked); without ``merge`` the edges and the collective's layout as they are."""
    layout = buffer_layout(coll)
    if not merge:
        return edges, layout, max_bytes, ()
    # at most what one call carries at the largest size the file serves
    most = runtime.max_allowed_count(proto, max_bytes or max(coll.size_bytes, min_bytes),
                                     layout.nchunksperloop)
    edges, layout = merged_edges(edges, layout, most, merge)
    return (edges, layout, *_served(edges, layout, proto, runtime, max_bytes))


def _served(edges: tuple[Edge, ...], layout: Layout, proto: str, runtime: RuntimeLimits, max_bytes: int
            ) -> tuple[int, tuple[str, ...]]:
    """The file's ``maxBytes`` once steps carry several chunks: the largest size at which
    its largest step is one call, where no smaller one was asked for; and the note that
    says so."""
    cnt = max((len(e.more) + 1 for e in edges), default=1)
    if cnt == 1:
        return max_bytes, ()
    most = one_call_up_to(runtime, proto, layout.nchunksperloop, cnt)
    if max_bytes and max_bytes <= most:
        return max_bytes, ()
    return most, (f"steps carry up to {cnt} chunks, which the runtime moves in one call up "
                  f"to {most} bytes: the file serves sizes up to that (maxBytes)",)


def _check_steps(edges: list, nranks: int, runtime: RuntimeLimits) -> None:
    """Raise :class:`RuntimeLimitError` at once where a rank has more edges in or out than
    the runtime's reader holds steps (each edge is a step of its receiver and of its
    sender, a fused step one of each), before the channel pass spends minutes finding out.
    """
    ins = np.bincount(np.fromiter((e.dst for e in edges), np.int64, len(edges)),
                      minlength=nranks)
    outs = np.bincount(np.fromiter((e.src for e in edges), np.int64, len(edges)),
                       minlength=nranks)
    most = np.maximum(ins, outs)
    room = runtime.step_room(nranks)
    rank = int(np.argmax(most))
    if most[rank] > room:
        raise RuntimeLimitError(
            f"rank position {rank} receives {ins[rank]:,} and sends {outs[rank]:,} chunks, "
            f"each a step of its own in the file (a fused step one of each): more than the "
            f"{room:,} steps the runtime's reader holds per rank ({runtime.max_elements} "
            f"elements less the <algo>, the {nranks} <gpu>s and a thread block)")


def _notes(favour: frozenset[int], timed: bool, delaying: int, limit: str, loose: int,
           nranks: int, elements: int) -> tuple[str, ...]:
    """Why the file may run slower than the schedule (``limit``: what it gave way to;
    ``loose``: the ranks whose links serve sends in the order they come; ``elements``:
    the runtime reader's limit per rank)."""
    unordered = (f"on {loose} of {nranks} ranks links serve sends in the order they come, "
                 "not the schedule's")
    if not timed:
        return (f"the file does not keep the schedule's timing {limit}: every fusion is "
                f"made ({delaying} of them hold up other steps)"
                + (f", and {unordered}" if loose else ""),)
    notes = []
    if favour:
        notes.append(f"{len(favour)} rank(s) keep fused steps that hold up other steps (the "
                     f"file may run slower than the schedule) {limit}; {delaying} such "
                     "fusion(s) made")
    if loose:
        notes.append(f"{unordered} (the file may run slower than the schedule) to fit the "
                     f"runtime's reader limit of {elements} elements")
    return tuple(notes)


def _name(name: str | None, schedule: Schedule) -> str:
    coll = schedule.collective
    if name is None:
        mode = "inplace" if coll.inplace else "outofplace"
        name = f"teccl_{schedule.topology.name}_{coll.kind.value}_{coll.nranks}_{mode}"
    clean = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
    return clean[:200]
