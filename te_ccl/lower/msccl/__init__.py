"""Lower a :class:`~te_ccl.schedule.Schedule` to an MSCCL XML algorithm (msccl-xml.md).

The pipeline, one pass per module, each leaving a valid intermediate form:

1. :mod:`collapse_switches` — transfers → GPU-to-GPU edges (switch paths collapsed),
   then :mod:`retime` — the edges timed by the schedule's replay instead of its epochs
   (what the file is measured against, and how the runtime runs: as soon as it can);
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
than the runtime's reader holds (``MSCCL.max_elements``), those ranks give up their
link order (no ``nop`` waits for a link's previous send); if ranks are still over, the
channel pass is rerun favouring the fusions of those ranks, even those that delay
steps; if ranks are still over (or more than a quarter of them were), once more with
every fusion on every rank, the ranks keeping their link order where they still fit
(fewest steps, the schedule's timing given up, and the program's ``notes`` say so).
An edge that fits no channel under the step budget while the timing is kept (each
relayed plain send counting its ``nop``) also gets that last run. A schedule cut into
sub-chunks (``SolveInfo.subchunks``) never gets it: it raises, to be solved again with
fewer (:func:`~te_ccl.compiler.pipeline.render_fitting`). What still
does not fit raises :class:`~te_ccl.errors.RuntimeLimitError`, never a file the runtime
would refuse.

Time: every pass observes the deadline of the compile under way
(:mod:`te_ccl.deadline`), raising
:class:`~te_ccl.deadline.TimeLimitReached` (exit 3) once it has passed, and
``progress`` hears which pass runs (and which GPU the last pass has reached). From
:data:`~te_ccl.background.WORTH_FORKING` edges, the instructions and fusions of pass 2
and passes 4–6 (independent per GPU) are dealt over forked processes, one per core
(:mod:`te_ccl.background`); the bytes are the same. Pass 3 runs in one process alone
unless it runs in two halves at once (:func:`_halves`). From
:data:`CHILD_FROM` transfers the whole lowering runs in a forked process, which leaves
without freeing its millions of objects (seconds at 1024 GPUs).

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
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from math import ceil

from te_ccl.background import WORTH_FORKING, dealt, left_to_exit, told, workers
from te_ccl.deadline import check, checked
from te_ccl.errors import RuntimeLimitError, SpecError
from te_ccl.lower.msccl.buffers import Layout, ResolvedSlots, buffer_layout, resolve_slots
from te_ccl.lower.msccl.channels import (
    ChannelsExhausted,
    EdgeChannels,
    assign_channels,
    spread_channels,
)
from te_ccl.lower.msccl.collapse_switches import Edge, collapse_switches
from te_ccl.lower.msccl.dependencies import add_dependencies
from te_ccl.lower.msccl.instructions import (
    Fusion,
    Instr,
    apply_fusions,
    build_instructions,
    first_receipts,
    fusion_candidates,
)
from te_ccl.lower.msccl.ir import LOWERING, Gpu, Op, Program
from te_ccl.lower.msccl.retime import replay_timed
from te_ccl.lower.msccl.threadblocks import build_threadblocks, holding_pairings
from te_ccl.lower.msccl.to_xml import algo_close, algo_open, gpu_xml
from te_ccl.nogc import paused_gc
from te_ccl.outputs import write_atomic
from te_ccl.runtime_limits import MSCCL, PROTOCOLS
from te_ccl.schedule import Schedule

__all__ = ["PROTOCOLS", "StepsExhausted", "build_program", "lower_to_msccl", "write_msccl"]

NOP_HEADROOM = 1 / 16  # of max_steps, kept for dependency nops
CHILD_FROM = WORTH_FORKING  # transfers: from here the lowering runs in a forked process
#                            (:func:`~te_ccl.background.told`), which never frees its objects
HERE_SHARE = 0.4  # of the GPUs whose fusions this process finds where others are forked:
#                    it also builds every GPU's instructions, they only their own
HALVES_FROM = 1_000_000  # edges: from here the channels of the edges to higher and to lower
#                          GPU positions are found apart, in two processes at once, unless
HALVES_GIVE_UP = 0.01  # more than this share of the fusions goes from one half to the other
HERE_WEIGHT = 1.17  # this process's part of the thread-block pass against a forked one's:
#                     a forked process also pays for the pages it copies and sends its bytes
Progress = Callable[[str], None]
_Half = tuple[tuple[Edge, ...], list[Fusion]]  # its edges, and the fusions within them


def _quiet(message: str) -> None:
    """The default ``progress``: nobody listens."""


def lower_to_msccl(schedule: Schedule, *, name: str | None = None, min_bytes: int = 0,
                   max_bytes: int = 0, proto: str | None = None, max_steps: int = 64,
                   notes: list[str] | None = None, progress: Progress = _quiet) -> bytes:
    """The MSCCL XML of ``schedule`` (deterministic: same schedule, same bytes).

    ``max_bytes=0`` means no upper size limit; ``proto`` defaults to the collective's.
    ``notes``, if given, receives the program's notes (where the file cannot keep the
    schedule's timing); ``progress`` hears what the lowering is doing.
    Raises :class:`TecclError` for what MSCCL cannot express (in-switch reduction, relays
    through GPUs outside the collective), and its subclass :class:`RuntimeLimitError`
    for what the runtime cannot hold (more than 32 channels, 64 steps per thread block,
    1024 thread blocks, 128 waited thread blocks or 4096 elements per rank);
    :class:`~te_ccl.deadline.TimeLimitReached` once the compile's deadline passes.

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
               "max_steps": max_steps}
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
                  max_bytes: int = 0, proto: str | None = None, max_steps: int = 64) -> Program:
    """The :class:`Program` IR of ``schedule`` (see :func:`lower_to_msccl`)."""
    with paused_gc():
        head, gpus = _lower(schedule, name=name, min_bytes=min_bytes, max_bytes=max_bytes,
                            proto=proto, max_steps=max_steps, stream=False,
                            progress=_quiet)
        return replace(head, gpus=tuple(gpus))




class StepsExhausted(RuntimeLimitError):
    """Even one data step per thread block overflows ``max_steps`` once its dependency
    nops are added (a tight limit and a step that waits on many thread blocks)."""


class _Overflow(Exception):
    """The nops of the dependency pass pushed a thread block ``excess`` steps over."""

    def __init__(self, excess: int) -> None:
        self.excess = excess


def _lower(schedule: Schedule, *, name: str | None, min_bytes: int, max_bytes: int,
           proto: str | None, max_steps: int, stream: bool, progress: Progress
           ) -> tuple[Program, list]:
    """The ``<algo>`` header (no GPUs) and every GPU: as XML bytes if ``stream`` (so that
    only one GPU's steps exist at a time), else as :class:`Gpu`."""
    coll = schedule.collective
    proto = proto or coll.proto
    if proto not in PROTOCOLS:
        raise SpecError(f"expected one of {', '.join(PROTOCOLS)}, got {proto!r}", key="proto")
    if min_bytes < 0 or max_bytes < 0 or (max_bytes and max_bytes < min_bytes):
        raise SpecError(f"bad size range [{min_bytes}, {max_bytes}]", key="maxBytes")
    layout = buffer_layout(coll)
    progress(f"lowering: {len(schedule.transfers)} transfers to GPU-to-GPU edges")
    epoch_timed = collapse_switches(schedule)
    edges = replay_timed(epoch_timed, schedule)
    check(LOWERING)
    progress(f"lowering: instructions of {coll.nranks} GPUs")
    base, found = _instructions(edges, layout,
                                workers() if len(edges) >= WORTH_FORKING else 1)
    first = first_receipts(edges)  # the same for every rerun of the channel pass
    headroom = max(1, int(max_steps * NOP_HEADROOM))
    depth = MSCCL.outstanding_sends(proto)
    full = max_steps - headroom if max_steps > 2 * headroom else max_steps
    budget = full
    favour: frozenset[int] = frozenset()
    timed, why = True, ""  # why the timing is given up (for the notes)
    # a schedule cut into sub-chunks is solved again with fewer where it does not fit
    # (pipeline.render_fitting), which keeps its timing: it never gives the timing up
    refit = schedule.info.subchunks > 1
    split = edges is not epoch_timed  # thread blocks are split by the replay's times only
    peers: dict[int, set[int]] | None = None  # where GPUs are dealt over forked processes
    while budget > 0:
        candidates = [f for f in found if not f.delays or not timed or f.recv.gpu in favour]
        progress(f"lowering: channels for {len(edges)} edges ({len(candidates)} fusions to "
                 "try)")
        halves = _halves(edges, candidates) if len(edges) >= HALVES_FROM else None
        try:  # sending thread blocks are waited for: a send waits for the link's last one
            chan, fusions, delaying = _assign(edges, candidates, halves, budget, True, depth,
                                              favour, timed, split, first)
        except ChannelsExhausted as e:
            steps_limit = (f"at most {max_steps} steps per thread block within "
                           f"{MSCCL.max_channels} channels")
            if not timed or refit:
                raise ChannelsExhausted(f"{e}: cannot keep {steps_limit}") from None
            # fewest steps; the link-order nops are not counted, so the cuts made for
            # them do not apply
            timed, why, budget = False, f"to fit {steps_limit}", full
            continue
        forks = workers() if stream and len(edges) >= WORTH_FORKING else 1
        if forks > 1 and peers is None:
            peers = _peers(edges)
        parts = _parts(sorted(base), forks)
        gpus_of = partial(_gpus, base=base, fusions=fusions, peers=peers, chan=chan,
                          layout=layout, budget=budget, max_steps=max_steps, timed=timed,
                          stream=stream, nranks=coll.nranks)
        try:
            gpus, over, loose = _in_parts(gpus_of, parts, progress)
        except _Overflow as e:  # the channel pass counts data steps, not the nops
            budget -= max(e.excess, headroom)
            continue
        if refit and (over or loose):  # favouring ranks or giving up link order loses time
            some = over or loose
            raise RuntimeLimitError(
                f"{len(some)} rank(s) need more than {MSCCL.max_elements} XML elements (the "
                f"runtime's reader limit), e.g. rank position {min(some)}, unless the file "
                "gives up the schedule's timing; fewer sub-chunks per chunk would fit")
        if not over:
            left_to_exit(epoch_timed, edges, base, found, first, candidates, chan, fusions)
            nchannels = 1 + max(chan.values(), default=0)
            return Program(_name(name, schedule), proto, nchannels, layout.nchunksperloop,
                           coll.nranks, coll.kind.value, coll.inplace, min_bytes, max_bytes,
                           (), _notes(favour, timed, delaying, why, len(loose), coll.nranks)
                           ), gpus
        del gpus
        # favouring is for a few ranks: favouring a quarter of them would favour none
        last = bool(favour) or len(over) > max(1, coll.nranks // 4)
        if not timed:
            raise RuntimeLimitError(
                f"{len(over)} rank(s) need more than {MSCCL.max_elements} XML elements (the "
                f"runtime's reader limit), e.g. rank position {min(over)}, even with every "
                "fusion made")
        why = f"to fit the runtime's reader limit of {MSCCL.max_elements} elements"
        if last:  # every fusion on every rank
            timed, favour = False, frozenset()
        else:  # rerun favouring the ranks over the limit
            favour = frozenset(over)
    raise StepsExhausted(f"cannot fit the schedule into {max_steps} steps per thread block "
                         "(the nops of its dependencies alone exceed it)")


def _instructions(edges: tuple[Edge, ...], layout: Layout, forks: int
                  ) -> tuple[dict[int, list[Instr]], list[Fusion]]:
    """Every GPU's instructions (:func:`build_instructions`) and :func:`fusion_candidates`,
    in GPU order. With ``forks > 1`` the forked processes start at once: each builds the
    instructions of its own GPUs and finds their fusions, while this process builds every
    GPU's (it keeps them) and finds the fusions of :data:`HERE_SHARE` of the GPUs. A
    forked process returns its fusions as positions in its GPUs' instructions, which are
    built the same here, since the channel pass and :func:`apply_fusions` know
    instructions by identity."""
    gpus = list(range(layout.collective.nranks))
    here = gpus[:int(len(gpus) * HERE_SHARE)] if forks > 1 else gpus
    rest = gpus[len(here):]
    base: dict[int, list[Instr]] = {}

    def built_here(part: list[int]) -> dict[int, list[Fusion]]:
        base.update(build_instructions(edges, layout))
        return {g: fusion_candidates(base[g], layout) for g in checked(part, LOWERING, every=1)}

    mine, *others = dealt(built_here, partial(_fusion_positions, edges, layout),
                          [here, *(rest[i::forks - 1] for i in range(forks - 1))])
    for g, positions in (x for part in others for x in part):
        instrs = base[g]
        mine[g] = [Fusion(instrs[r], instrs[s], op, delays) for r, s, op, delays in positions]
    return base, [f for g in gpus for f in mine[g]]


def _parts(gpus: list[int], forks: int) -> list[list[int]]:
    """``gpus`` cut into ``forks`` contiguous parts (a GPU's peers are mostly in its own
    part), the first, which stays in this process, :data:`HERE_WEIGHT` times as large as
    the others."""
    first = ceil(len(gpus) * HERE_WEIGHT / (HERE_WEIGHT + forks - 1))
    rest, others = gpus[first:], forks - 1
    return [gpus[:first]] + [rest[len(rest) * i // others:len(rest) * (i + 1) // others]
                             for i in range(others)]


def _fusion_positions(edges: tuple[Edge, ...], layout: Layout, gpus: list[int]
                      ) -> list[tuple[int, list[tuple[int, int, Op, bool]]]]:
    """:func:`fusion_candidates` of ``gpus`` as (receive, send) positions in their
    instructions."""
    base, out = build_instructions(edges, layout, gpus), []
    for g in checked(gpus, LOWERING, every=1):
        at = {id(ins): k for k, ins in enumerate(base[g])}
        out.append((g, [(at[id(f.recv)], at[id(f.send)], f.op, f.delays)
                        for f in fusion_candidates(base[g], layout)]))
    left_to_exit(base)
    return out


def _peers(edges: tuple[Edge, ...]) -> dict[int, set[int]]:
    """The GPUs each GPU sends to or receives from."""
    peers: dict[int, set[int]] = defaultdict(set)
    for src, dst in {(e.src, e.dst) for e in edges}:
        peers[src].add(dst)
        peers[dst].add(src)
    return peers


def _gpus(part: list[int], progress: Progress, *, base: dict[int, list[Instr]],
          fusions: dict[int, list[Fusion]], peers: dict[int, set[int]] | None,
          chan: EdgeChannels, layout: Layout, budget: int, max_steps: int, timed: bool,
          stream: bool, nranks: int) -> tuple[list[tuple[int, object]], set[int], set[int], int]:
    """``(GPU, its XML bytes if stream else its Gpu)`` of the GPUs in ``part``, those over
    the runtime's element limit, those that keep no link order (their sends then leave
    in the order their values come: no ``nop`` waits for the link's previous send), and
    the most steps a thread block has over ``max_steps`` (once one has, the others are
    only measured: the budget is cut by the worst excess). A rank keeps its links' order
    unless it would then exceed the element limit or, after a channel pass that did not
    count the ``nop``s (not ``timed``), the steps of a thread block.

    The fusions kept are applied here, and the slots resolved, for the GPUs of ``part``
    and their ``peers`` (a step prints the slot at the other end of its edge), or for
    every GPU where ``peers`` is None."""
    near = base if peers is None else sorted(set(part).union(*(peers[g] for g in part)))
    instrs = {g: apply_fusions(base[g], fusions.get(g, []))
              for g in checked(near, LOWERING, every=64)}
    slots = resolve_slots(instrs)
    out, over, loose, excess = [], set(), set(), 0
    for g in part:
        if g % 64 == 0:
            progress(f"lowering: thread blocks of GPU {g} of {nranks}")
        check(LOWERING)
        try:
            gpu = _gpu(g, instrs[g], chan, slots, layout, budget, max_steps, True)
        except _Overflow as e:
            if timed:  # the channel pass counted the nops: it is rerun with a smaller budget
                excess = max(excess, e.excess)
                continue
            gpu = None  # it did not: this rank gives up the link order instead
        if excess:
            continue
        if gpu is None or _elements(gpu, nranks) > MSCCL.max_elements:
            try:
                gpu = _gpu(g, instrs[g], chan, slots, layout, budget, max_steps, False)
            except _Overflow as e:
                excess = max(excess, e.excess)
                continue
            loose.add(g)
        if _elements(gpu, nranks) > MSCCL.max_elements:
            over.add(g)
        out.append((g, gpu_xml(gpu).encode() if stream else gpu))
    left_to_exit(instrs, slots)
    return out, over, loose, excess


def _elements(gpu: Gpu, nranks: int) -> int:
    """What the runtime's reader counts for one rank: the ``<algo>``, every ``<gpu>``, and
    the rank's thread blocks and steps."""
    return nranks + 1 + sum(1 + len(tb.steps) for tb in gpu.threadblocks)


def _in_parts(gpus_of: Callable[[list[int], Progress], tuple[list, set[int], set[int], int]],
              parts: list[list[int]], progress: Progress
              ) -> tuple[list, set[int], set[int]]:
    """Every GPU in GPU order: the first part here, the others in forked processes
    (:mod:`te_ccl.background`) at the same time, each GPU's pass being independent;
    :class:`_Overflow` by the worst excess of any."""
    done, over, loose, excess = [], set(), set(), 0
    for more, more_over, more_loose, more_excess in dealt(partial(gpus_of, progress=progress),
                                                          partial(gpus_of, progress=_quiet),
                                                          parts):
        done += more
        over |= more_over
        loose |= more_loose
        excess = max(excess, more_excess)
    if excess:
        raise _Overflow(excess)
    return [gpu for _, gpu in sorted(done, key=lambda x: x[0])], over, loose


def _notes(favour: frozenset[int], timed: bool, delaying: int, limit: str, loose: int,
           nranks: int) -> tuple[str, ...]:
    """Why the file may run slower than the schedule (``limit``: what it gave way to;
    ``loose``: the ranks whose links serve sends in the order they come)."""
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
                     f"runtime's reader limit of {MSCCL.max_elements} elements")
    return tuple(notes)


def _assign(edges: tuple[Edge, ...], candidates: list[Fusion],
            halves: tuple[_Half, _Half] | None, budget: int, sends_waited: bool, depth: int,
            favour: frozenset[int], timed: bool, split: bool, first: dict[tuple[int, int], Edge]
            ) -> tuple[EdgeChannels, dict[int, list[Fusion]], int]:
    """Channels with at most ``budget`` data steps per thread block (fusions on the
    ``favour`` GPUs first), found in ``halves`` (:func:`_halves`) at once if given, the
    fusions kept per GPU, and how many of them delay another step. With ``split`` (edges
    timed by the schedule's replay), pairings whose thread block would hold up its own
    receives are given up. ``first``: :func:`first_receipts` of the edges."""
    assign = partial(assign_channels, budget=budget, sends_waited=sends_waited, depth=depth,
                     favour=favour, timed=timed, received=first)
    if halves is None:
        chan, kept = assign(edges, candidates)
    else:
        chan, kept = _halves_apart(assign, halves,
                                   spread_channels(edges, budget, sends_waited))
    if timed and split:  # a thread block joined by fusions must not hold up its receives
        held = holding_pairings(edges, chan, [f for f in kept if f.recv.gpu not in favour],
                                MSCCL.waitable, budget, first)
        kept = [f for f in kept if (f.recv.gpu, chan[id(f.recv.recv)], f.recv.recv.src,
                                    f.send.send.dst) not in held]
    fusions: dict[int, list[Fusion]] = defaultdict(list)
    for f in kept:
        fusions[f.recv.gpu].append(f)
    return chan, fusions, sum(f.delays for f in kept)


def _halves(edges: tuple[Edge, ...], candidates: list[Fusion]) -> tuple[_Half, _Half] | None:
    """The edges to higher and to lower GPU positions, each with the fusions inside it
    (a fusion across, which turns back, is given up), or None where one half is empty or
    more than :data:`HALVES_GIVE_UP` of the fusions would be given up.

    No connection, hence no thread block or pairing, is in both halves, so each half's
    channels are found on its own, on every channel. On a mesh a relay mostly goes on in
    the direction it came from (0.09% of the mesh 32×32 AllReduce's fusions turn back);
    on a torus every chain that crosses a wrap-around link would turn (its GPU positions
    go from the highest to the lowest), and its ranks would no longer fit the reader."""
    inside: tuple[list[Fusion], list[Fusion]] = ([], [])
    # the turns left to give up: on a torus the look ends at its first GPUs
    turns = int(HALVES_GIVE_UP * len(candidates))
    for f in candidates:
        up = _rising(f.send.send)
        if _rising(f.recv.recv) == up:
            inside[not up].append(f)
        elif turns:
            turns -= 1
        else:
            return None
    sides: tuple[list[Edge], list[Edge]] = ([], [])
    for e in edges:
        sides[not _rising(e)].append(e)
    if not sides[0] or not sides[1]:
        return None
    return (tuple(sides[0]), inside[0]), (tuple(sides[1]), inside[1])


def _rising(e: Edge) -> bool:
    """Does the edge go to a higher GPU position (the halves of :func:`_halves`)?"""
    return e.dst > e.src


def _halves_apart(assign: Callable[..., tuple[EdgeChannels, list[Fusion]]],
                  halves: tuple[_Half, _Half], spread: int) -> tuple[EdgeChannels, list[Fusion]]:
    """The channels and kept fusions of both halves, each dealt over the ``spread`` of all
    the edges with half of the thread blocks a GPU may have waited for: the first half's
    here, the second's at the same time in a forked process, which returns them as
    positions."""
    limits = {"waitable": MSCCL.waitable // 2, "spread": spread}

    def here(half: _Half) -> tuple[EdgeChannels, list[Fusion]]:
        return assign(*half, **limits)

    def forked(half: _Half) -> tuple[list[int], list[int]]:
        edges, fusions = half
        chan, kept = assign(edges, fusions, **limits)
        at = {id(f): i for i, f in enumerate(fusions)}
        return [chan[id(e)] for e in edges], [at[id(f)] for f in kept]

    (chan, kept), (channels, positions) = dealt(here, forked, halves)
    edges, fusions = halves[1]
    for e, c in zip(edges, channels, strict=True):
        chan[id(e)] = c
    return chan, kept + [fusions[i] for i in positions]


def _gpu(g: int, instrs: list[Instr], chan: EdgeChannels, slots: ResolvedSlots,
         layout: Layout, budget: int, max_steps: int, link_order: bool) -> Gpu:
    """One GPU's thread blocks with their dependencies; :class:`_Overflow` if too long."""
    plans = build_threadblocks(instrs, chan, budget)
    if len(plans) > MSCCL.max_threadblocks:
        raise RuntimeLimitError(f"rank position {g} needs {len(plans)} thread blocks "
                                f"(the runtime allows {MSCCL.max_threadblocks})")
    tbs = add_dependencies(g, plans, slots, link_order)
    longest = max((len(tb.steps) for tb in tbs), default=0)
    if longest > max_steps:
        raise _Overflow(longest - max_steps)
    return Gpu(g, layout.i_chunks, layout.o_chunks, slots.s_chunks(g), tuple(tbs))


def _name(name: str | None, schedule: Schedule) -> str:
    coll = schedule.collective
    if name is None:
        mode = "inplace" if coll.inplace else "outofplace"
        name = f"teccl_{schedule.topology.name}_{coll.kind.value}_{coll.nranks}_{mode}"
    clean = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
    return clean[:200]
