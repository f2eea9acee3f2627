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
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from te_ccl.background import WORTH_FORKING, left_to_exit, told, workers
from te_ccl.collective.model import Collective
from te_ccl.deadline import check
from te_ccl.errors import RuntimeLimitError, SpecError
from te_ccl.lower.msccl.buffers import Layout, buffer_layout
from te_ccl.lower.msccl.channels import ChannelsExhausted, EdgeChannels
from te_ccl.lower.msccl.collapse_switches import Edge, collapse_switches
from te_ccl.lower.msccl.grid import grid_program
from te_ccl.lower.msccl.instructions import Fusion, Instr, first_receipts
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
    where the epochs pace them."""
    coll = schedule.collective
    proto = proto or coll.proto
    _check_options(proto, merge, min_bytes, max_bytes)
    name = _name(name, schedule)
    grid = grid_program(schedule, name, proto, min_bytes, max_bytes, runtime, text=stream)
    if grid is not None:  # groups relayed in one step each: the plan's steps as they are
        return grid
    progress(f"lowering: {len(schedule.transfers)} transfers to GPU-to-GPU edges")
    epoch_timed = collapse_switches(schedule)
    edges = epoch_timed if epochs else replay_timed(epoch_timed, schedule)
    split = edges is not epoch_timed  # thread blocks are split by the replay's times only
    edges, layout, served, merged = _merged(edges, coll, proto, min_bytes, max_bytes,
                                            runtime, merge)
    check(LOWERING)
    if len(edges) >= WORTH_FORKING:  # below, the channel pass finds out in a second
        _check_steps(edges, coll.nranks, runtime)
    progress(f"lowering: instructions of {coll.nranks} GPUs")
    base, found = instructions_and_fusions(edges, layout,
                                           workers() if len(edges) >= FORK_FROM else 1)
    lowering = _Lowering(edges, base, found, first_receipts(edges), layout,
                         _Limits.of(runtime, proto, max_steps, schedule.info.subchunks > 1),
                         split=split, stream=stream, progress=progress)
    fitted = _fitted(lowering)
    if fitted is None:
        return _lower(schedule, name=name, min_bytes=min_bytes, max_bytes=max_bytes,
                      proto=proto, max_steps=max_steps, stream=stream, progress=progress,
                      runtime=runtime, merge=merge, epochs=True)
    gpus, chan, notes = fitted
    left_to_exit(epoch_timed, edges, base, found, lowering.first, chan)
    nchannels = 1 + max(chan.values(), default=0)
    return Program(name, proto, nchannels, layout.nchunksperloop, coll.nranks, coll.kind.value,
                   coll.inplace, min_bytes, served, (), merged + notes), gpus


@dataclass(frozen=True)
class _Limits:
    """What passes 3–6 keep to, from the runtime, the protocol and ``max_steps``.

    Where the runtime allows fewer thread blocks per GPU than ``depid`` can name (RCCL:
    64), every thread block is counted as waited for (``capped``), so the channel pass
    keeps a GPU's thread blocks (one left for its local copies) within the runtime's by
    construction."""

    runtime: RuntimeLimits
    max_steps: int
    headroom: int  # steps of a thread block kept for the nops the channel pass does not count
    full: int      # the channel pass's first budget of data steps per thread block
    depth: int     # sends a connection holds under the protocol
    capped: bool   # every thread block counted (sending ones too) as waited for
    waitable: int  # thread blocks per GPU that others may wait for
    refit: bool    # a schedule cut into sub-chunks: solved again with fewer where it does
    #                not fit (render.render_fitting), so it never gives up its timing

    @classmethod
    def of(cls, runtime: RuntimeLimits, proto: str, max_steps: int, refit: bool) -> _Limits:
        headroom = max(1, int(max_steps * NOP_HEADROOM))
        return cls(runtime, max_steps, headroom,
                   max_steps - headroom if max_steps > 2 * headroom else max_steps,
                   runtime.outstanding_sends(proto),
                   runtime.max_threadblocks <= runtime.waitable,
                   min(runtime.waitable, runtime.max_threadblocks - 1), refit)

    def steps_limit(self) -> str:
        """What an edge that fits no channel could not keep, for the error."""
        r = self.runtime
        return (f"at most {self.max_steps} steps per thread block within {r.max_channels} "
                "channels" + (f" and {r.max_threadblocks} thread blocks per GPU"
                              if self.capped else ""))


@dataclass
class _Lowering:
    """Pass 2's output and what every rerun of passes 3–6 shares."""

    edges: tuple[Edge, ...]
    base: dict[int, list[Instr]]  # every GPU's instructions
    found: list[Fusion]           # the receive/send pairs that can be fused
    first: dict[tuple[int, int], Edge]  # :func:`first_receipts` of the edges
    layout: Layout
    limits: _Limits
    split: bool  # the edges carry the replay's times: thread blocks are split by them
    stream: bool
    progress: Progress
    peers: dict[int, set[int]] | None = None  # where GPUs are dealt over forked processes

    @property
    def nranks(self) -> int:
        return self.layout.collective.nranks


@dataclass(frozen=True)
class _Attempt:
    """How passes 3–6 run this time: the channel pass's budget of data steps per thread
    block, the GPUs whose fusions go first (even those that delay steps), whether the
    schedule's timing is kept (and if not, ``why``), and whether sending thread blocks
    are counted as waited for (a send waits for the link's last one)."""

    budget: int
    favour: frozenset[int] = frozenset()
    timed: bool = True
    why: str = ""
    waited: bool = True


def _fitted(lowering: _Lowering) -> tuple[list, EdgeChannels, tuple[str, ...]] | None:
    """Passes 3–6 rerun until every thread block and rank fits: the GPUs, the edges'
    channels and the notes; None where the edges are to be timed by the epochs instead
    (the module's docstring tells the order in which limits are given way to)."""
    attempt = _Attempt(lowering.limits.full)
    while attempt.budget > 0:
        try:
            chan, fusions, delaying = _channel_pass(lowering, attempt)
        except ChannelsExhausted as e:
            then = _after_exhausted(e, attempt, lowering)
            if then is None:
                return None
            attempt = then
            continue
        try:
            gpus, over, loose = _gpu_passes(lowering, attempt, chan, fusions)
        except NopOverflow as e:  # the channel pass counts data steps, not the nops
            attempt = replace(attempt, budget=attempt.budget
                              - max(e.excess, lowering.limits.headroom))
            continue
        except RuntimeLimitError:  # the dependencies of unwaited sending thread blocks
            if attempt.waited or lowering.limits.refit or not lowering.split:
                raise
            return None
        if not over:
            left_to_exit(fusions)
            return gpus, chan, _notes(attempt, delaying, len(loose), lowering.nranks,
                                      lowering.limits.runtime.max_elements)
        del gpus
        attempt = _after_over(over, attempt, lowering)
    raise StepsExhausted(f"cannot fit the schedule into {lowering.limits.max_steps} steps per "
                         "thread block (the nops of its dependencies alone exceed it)")


def _channel_pass(lowering: _Lowering, attempt: _Attempt
                  ) -> tuple[EdgeChannels, dict[int, list[Fusion]], int]:
    """Pass 3 (:func:`assign_edges`) on the fusions ``attempt`` allows: those that delay
    no step, unless the timing is given up or their GPU is favoured."""
    edges, limits, timed = lowering.edges, lowering.limits, attempt.timed
    candidates = [f for f in lowering.found
                  if not f.delays or not timed or f.recv.gpu in attempt.favour]
    lowering.progress(f"lowering: channels for {len(edges)} edges ({len(candidates)} "
                      "fusions to try)")
    halves = split_halves(edges, candidates, lowering.nranks,
                          limits.runtime.step_room(lowering.nranks))
    return assign_edges(edges, candidates, halves, attempt.budget, attempt.waited,
                        limits.depth, attempt.favour, timed, lowering.split, lowering.first,
                        limits.runtime.max_channels, limits.waitable)


def _after_exhausted(e: ChannelsExhausted, attempt: _Attempt, lowering: _Lowering
                     ) -> _Attempt | None:
    """The next attempt once an edge fits no channel: the timing given up (fewest steps;
    the link-order nops are not counted, so the cuts made for them do not apply), then
    only the receiving thread blocks counted as waited for; None: time the edges by the
    epochs; raises where nothing is left to give up."""
    limits = lowering.limits
    if not attempt.timed and attempt.waited and not limits.refit and not limits.capped:
        # last: a GPU can have one thread block for each of its 71 peers each way (an
        # AlltoAll over one switch); where the dependencies need more,
        # add_dependencies refuses it
        return replace(attempt, waited=False)
    if not attempt.timed and not limits.refit and lowering.split:
        return None
    if not attempt.timed or limits.refit:
        raise ChannelsExhausted(f"{e}: cannot keep {limits.steps_limit()}") from None
    return replace(attempt, timed=False, why=f"to fit {limits.steps_limit()}",
                   budget=limits.full)


def _gpu_passes(lowering: _Lowering, attempt: _Attempt, chan: EdgeChannels,
                fusions: dict[int, list[Fusion]]) -> tuple[list, set[int], set[int]]:
    """Passes 4–6 (thread blocks, dependencies, bytes) of every GPU, dealt over forked
    processes from :data:`FORK_FROM` edges where streamed: the GPUs, the ranks over the
    runtime's element limit and those that keep no link order (:func:`in_parts`)."""
    edges, limits = lowering.edges, lowering.limits
    forks = workers() if lowering.stream and len(edges) >= FORK_FROM else 1
    if forks > 1 and lowering.peers is None:
        lowering.peers = peer_sets(edges)
    gpus_of = partial(gpus_in_part, base=lowering.base, fusions=fusions, peers=lowering.peers,
                      chan=chan, layout=lowering.layout, budget=attempt.budget,
                      max_steps=limits.max_steps, timed=attempt.timed,
                      stream=lowering.stream, nranks=lowering.nranks, runtime=limits.runtime)
    gpus, over, loose = in_parts(gpus_of, deal(sorted(lowering.base), forks),
                                 lowering.progress)
    if limits.refit and (over or loose):  # favouring ranks or giving up link order loses time
        some = over or loose
        raise RuntimeLimitError(
            f"{len(some)} rank(s) need more than {limits.runtime.max_elements} XML elements "
            f"(the runtime's reader limit), e.g. rank position {min(some)}, unless the file "
            "gives up the schedule's timing; fewer sub-chunks per chunk would fit")
    return gpus, over, loose


def _after_over(over: set[int], attempt: _Attempt, lowering: _Lowering) -> _Attempt:
    """The next attempt once ranks need more elements than the runtime's reader holds:
    favouring their fusions, then (or where more than a quarter of the ranks are over:
    favouring a quarter of them would favour none) every fusion on every rank."""
    elements = lowering.limits.runtime.max_elements
    if not attempt.timed:
        raise RuntimeLimitError(
            f"{len(over)} rank(s) need more than {elements} XML elements (the runtime's "
            f"reader limit), e.g. rank position {min(over)}, even with every fusion made")
    why = f"to fit the runtime's reader limit of {elements} elements"
    if attempt.favour or len(over) > max(1, lowering.nranks // 4):
        return replace(attempt, timed=False, favour=frozenset(), why=why)
    return replace(attempt, favour=frozenset(over), why=why)


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


def _notes(attempt: _Attempt, delaying: int, loose: int, nranks: int, elements: int
           ) -> tuple[str, ...]:
    """Why the file may run slower than the schedule (``delaying``: the fusions made that
    hold up other steps; ``loose``: the ranks whose links serve sends in the order they
    come; ``elements``: the runtime reader's limit per rank)."""
    unordered = (f"on {loose} of {nranks} ranks links serve sends in the order they come, "
                 "not the schedule's")
    if not attempt.timed:
        return (f"the file does not keep the schedule's timing {attempt.why}: every fusion "
                f"is made ({delaying} of them hold up other steps)"
                + (f", and {unordered}" if loose else ""),)
    notes = []
    if attempt.favour:
        notes.append(f"{len(attempt.favour)} rank(s) keep fused steps that hold up other "
                     f"steps (the file may run slower than the schedule) {attempt.why}; "
                     f"{delaying} such fusion(s) made")
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
