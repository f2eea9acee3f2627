"""Passes 2 and 4–6 of the lowering dealt over forked processes, one per core.

The instructions and fusions of each GPU (pass 2) and its thread blocks, dependencies
and bytes (passes 4–6) depend on no other GPU's, so from
:data:`~te_ccl.lower.msccl.passes.FORK_FROM` edges they are computed in parts
(:mod:`te_ccl.background`); the channel pass (3) runs in one process unless it runs in
two halves at once (:func:`split_halves`). The bytes are the same as in one process.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import partial
from math import ceil

import numpy as np

from te_ccl.background import dealt, left_to_exit
from te_ccl.deadline import check, checked
from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl.buffers import Layout, ResolvedSlots, resolve_slots
from te_ccl.lower.msccl.channels import EdgeChannels, assign_channels, spread_channels
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.dependencies import add_dependencies
from te_ccl.lower.msccl.instructions import (
    Fusion,
    Instr,
    apply_fusions,
    build_instructions,
    fusion_candidates,
)
from te_ccl.lower.msccl.ir import LOWERING, Gpu, Op
from te_ccl.lower.msccl.threadblocks import build_threadblocks, holding_pairings
from te_ccl.lower.msccl.to_xml import gpu_xml
from te_ccl.runtime_limits import RuntimeLimits

__all__ = ["NopOverflow", "Progress", "quiet", "assign_edges", "deal", "gpus_in_part", "in_parts",
           "instructions_and_fusions", "lower_gpu", "peer_sets", "split_halves"]

PARENT_FUSION_SHARE = 0.4  # of the GPUs whose fusions this process finds where others are
#                            forked: it also builds every GPU's instructions, they only theirs
HALVES_FROM = 1_000_000  # edges: from here the channels of the edges to higher and to lower
#                          GPU positions are found apart, in two processes at once, unless
HALVES_GIVE_UP = 0.01  # more than this share of the fusions goes from one half to the other,
HALVES_ROOM = 0.6  # and some rank's steps, so counted (:func:`_roomy`), exceed this share of the
#                    steps the runtime's reader holds per rank
PARENT_PART_WEIGHT = 1.17  # this process's part of the thread-block pass against a forked
#                            one's: a forked process also pays for the pages it copies and
#                            sends its bytes
Progress = Callable[[str], None]


def quiet(message: str) -> None:
    """The default ``progress``: nobody listens."""


_Half = tuple[tuple[Edge, ...], list[Fusion]]  # its edges, and the fusions within them


class NopOverflow(Exception):
    """The nops of the dependency pass pushed a thread block ``excess`` steps over."""

    def __init__(self, excess: int) -> None:
        self.excess = excess


def instructions_and_fusions(edges: tuple[Edge, ...], layout: Layout, forks: int
                  ) -> tuple[dict[int, list[Instr]], list[Fusion]]:
    """Every GPU's instructions (:func:`build_instructions`) and :func:`fusion_candidates`,
    in GPU order. With ``forks > 1`` the forked processes start at once: each builds the
    instructions of its own GPUs and finds their fusions, while this process builds every
    GPU's (it keeps them) and finds the fusions of :data:`PARENT_FUSION_SHARE` of the GPUs. A
    forked process returns its fusions as positions in its GPUs' instructions, which are
    built the same here, since the channel pass and :func:`apply_fusions` know
    instructions by identity."""
    gpus = list(range(layout.collective.nranks))
    here = gpus[:int(len(gpus) * PARENT_FUSION_SHARE)] if forks > 1 else gpus
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


def deal(gpus: list[int], forks: int) -> list[list[int]]:
    """``gpus`` cut into ``forks`` contiguous parts (a GPU's peers are mostly in its own
    part), the first, which stays in this process, :data:`PARENT_PART_WEIGHT` times as large as
    the others."""
    first = ceil(len(gpus) * PARENT_PART_WEIGHT / (PARENT_PART_WEIGHT + forks - 1))
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


def peer_sets(edges: tuple[Edge, ...]) -> dict[int, set[int]]:
    """The GPUs each GPU sends to or receives from."""
    peers: dict[int, set[int]] = defaultdict(set)
    for src, dst in {(e.src, e.dst) for e in edges}:
        peers[src].add(dst)
        peers[dst].add(src)
    return peers


def gpus_in_part(part: list[int], progress: Progress, *, base: dict[int, list[Instr]],
          fusions: dict[int, list[Fusion]], peers: dict[int, set[int]] | None,
          chan: EdgeChannels, layout: Layout, budget: int, max_steps: int, timed: bool,
          stream: bool, nranks: int, runtime: RuntimeLimits
          ) -> tuple[list[tuple[int, object]], set[int], set[int], int]:
    """``(GPU, its XML bytes if stream else its Gpu)`` of the GPUs in ``part``, those over
    ``runtime``'s element limit, those that keep no link order (their sends then leave
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
            gpu = lower_gpu(g, instrs[g], chan, slots, layout, budget, max_steps, True,
                            runtime)
        except NopOverflow as e:
            if timed:  # the channel pass counted the nops: it is rerun with a smaller budget
                excess = max(excess, e.excess)
                continue
            gpu = None  # it did not: this rank gives up the link order instead
        if excess:
            continue
        if gpu is None or _elements(gpu, nranks) > runtime.max_elements:
            try:
                gpu = lower_gpu(g, instrs[g], chan, slots, layout, budget, max_steps, False,
                                runtime)
            except NopOverflow as e:
                excess = max(excess, e.excess)
                continue
            loose.add(g)
        if _elements(gpu, nranks) > runtime.max_elements:
            over.add(g)
        out.append((g, gpu_xml(gpu).encode() if stream else gpu))
    left_to_exit(instrs, slots)
    return out, over, loose, excess


def _elements(gpu: Gpu, nranks: int) -> int:
    """What the runtime's reader counts for one rank: the ``<algo>``, every ``<gpu>``, and
    the rank's thread blocks and steps."""
    return nranks + 1 + sum(1 + len(tb.steps) for tb in gpu.threadblocks)


def in_parts(gpus_of: Callable[[list[int], Progress], tuple[list, set[int], set[int], int]],
              parts: list[list[int]], progress: Progress
              ) -> tuple[list, set[int], set[int]]:
    """Every GPU in GPU order: the first part here, the others in forked processes
    (:mod:`te_ccl.background`) at the same time, each GPU's pass being independent;
    :class:`NopOverflow` by the worst excess of any."""
    done, over, loose, excess = [], set(), set(), 0
    for more, more_over, more_loose, more_excess in dealt(partial(gpus_of, progress=progress),
                                                          partial(gpus_of, progress=quiet),
                                                          parts):
        done += more
        over |= more_over
        loose |= more_loose
        excess = max(excess, more_excess)
    if excess:
        raise NopOverflow(excess)
    return [gpu for _, gpu in sorted(done, key=lambda x: x[0])], over, loose


def assign_edges(edges: tuple[Edge, ...], candidates: list[Fusion],
            halves: tuple[_Half, _Half] | None, budget: int, sends_waited: bool, depth: int,
            favour: frozenset[int], timed: bool, split: bool, first: dict[tuple[int, int], Edge],
            channels: int, waitable: int) -> tuple[EdgeChannels, dict[int, list[Fusion]], int]:
    """Channels with at most ``budget`` data steps per thread block (fusions on the
    ``favour`` GPUs first), found in ``halves`` (:func:`split_halves`) at once if given, the
    fusions kept per GPU, and how many of them delay another step. With ``split`` (edges
    timed by the schedule's replay), pairings whose thread block would hold up its own
    receives are given up. ``first``: :func:`first_receipts` of the edges; ``channels``:
    the runtime's; ``waitable``: the thread blocks per GPU that others may wait for."""
    assign = partial(assign_channels, budget=budget, sends_waited=sends_waited, depth=depth,
                     favour=favour, timed=timed, received=first, channels=channels)
    if halves is None:
        chan, kept = assign(edges, candidates, waitable=waitable)
    else:
        spread = spread_channels(edges, budget, sends_waited, channels, waitable)
        chan, kept = _halves_apart(assign, halves, spread, waitable)
    if timed and split:  # a thread block joined by fusions must not hold up its receives
        held = holding_pairings(edges, chan, [f for f in kept if f.recv.gpu not in favour],
                                waitable, budget, first)
        kept = [f for f in kept if (f.recv.gpu, chan[id(f.recv.recv)], f.recv.recv.src,
                                    f.send.send.dst) not in held]
    fusions: dict[int, list[Fusion]] = defaultdict(list)
    for f in kept:
        fusions[f.recv.gpu].append(f)
    return chan, fusions, sum(f.delays for f in kept)


def split_halves(edges: tuple[Edge, ...], candidates: list[Fusion], nranks: int, room: int
                 ) -> tuple[_Half, _Half] | None:
    """The edges to higher and to lower GPU positions, each with the fusions inside it
    (a fusion across, which turns back, is given up), or None below :data:`HALVES_FROM`
    edges, where one half is empty, or where more than :data:`HALVES_GIVE_UP` of the
    fusions would be given up and a rank would then need more than :data:`HALVES_ROOM`
    of ``room``, the steps the runtime's reader holds per rank (:func:`_roomy`).

    No connection, hence no thread block or pairing, is in both halves, so each half's
    channels are found on its own, on every channel. On a mesh a relay mostly goes on in
    the direction it came from (0.09% of the mesh 32×32 AllReduce's fusions turn back);
    where routes turn from one dimension into the other (the mesh AllGather's and
    ReduceScatter's) many more do, but their ranks have steps to spare. On a torus every
    chain that crosses a wrap-around link would turn (its GPU positions go from the
    highest to the lowest), and the torus 32×32 AllReduce's ranks, with about twice the
    steps, would no longer fit the reader."""
    if len(edges) < HALVES_FROM:
        return None
    inside: tuple[list[Fusion], list[Fusion]] = ([], [])
    # the turns given up without a look at the ranks' room; where the average rank
    # already needs more than HALVES_ROOM of it, the look ends at the next turn (a torus:
    # at its first GPUs)
    turns = int(HALVES_GIVE_UP * len(candidates))
    may = 2 * len(edges) - len(candidates) <= HALVES_ROOM * room * nranks
    over = False
    for f in candidates:
        up = _rising(f.send.send)
        if _rising(f.recv.recv) == up:
            inside[not up].append(f)
        elif turns:
            turns -= 1
        elif may:
            over = True
        else:
            return None
    if over and not _roomy(edges, inside, nranks, room):
        return None
    sides: tuple[list[Edge], list[Edge]] = ([], [])
    for e in edges:
        sides[not _rising(e)].append(e)
    if not sides[0] or not sides[1]:
        return None
    return (tuple(sides[0]), inside[0]), (tuple(sides[1]), inside[1])


def _roomy(edges: tuple[Edge, ...], inside: tuple[list[Fusion], list[Fusion]], nranks: int,
           room: int) -> bool:
    """Does every rank keep within :data:`HALVES_ROOM` of ``room`` steps, counting one per
    edge it sends or receives, less one per fusion ``inside`` the halves on it? The
    count leaves out the ``nop`` steps and the fusions the channel pass does not make,
    hence the share."""
    steps = np.bincount(np.fromiter((e.src for e in edges), np.int64, len(edges)),
                        minlength=nranks)
    steps += np.bincount(np.fromiter((e.dst for e in edges), np.int64, len(edges)),
                         minlength=nranks)
    fused = [f.recv.gpu for half in inside for f in half]
    steps -= np.bincount(np.array(fused, np.int64), minlength=nranks)
    return int(steps.max()) <= HALVES_ROOM * room


def _rising(e: Edge) -> bool:
    """Does the edge go to a higher GPU position (the halves of :func:`split_halves`)?"""
    return e.dst > e.src


def _halves_apart(assign: Callable[..., tuple[EdgeChannels, list[Fusion]]],
                  halves: tuple[_Half, _Half], spread: int, waitable: int
                  ) -> tuple[EdgeChannels, list[Fusion]]:
    """The channels and kept fusions of both halves, each dealt over the ``spread`` of all
    the edges with half of the ``waitable`` thread blocks a GPU may have: the first half's
    here, the second's at the same time in a forked process, which returns them as
    positions."""
    limits = {"waitable": waitable // 2, "spread": spread}

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


def lower_gpu(g: int, instrs: list[Instr], chan: EdgeChannels, slots: ResolvedSlots,
         layout: Layout, budget: int, max_steps: int, link_order: bool,
         runtime: RuntimeLimits) -> Gpu:
    """One GPU's thread blocks with their dependencies, within ``runtime``'s thread
    blocks; :class:`NopOverflow` if too long."""
    plans = build_threadblocks(instrs, chan, budget)
    if len(plans) > runtime.max_threadblocks:
        raise RuntimeLimitError(f"rank position {g} needs {len(plans)} thread blocks "
                                f"({runtime.name} allows {runtime.max_threadblocks})")
    tbs = add_dependencies(g, plans, slots, link_order, runtime.waitable)
    longest = max((len(tb.steps) for tb in tbs), default=0)
    if longest > max_steps:
        raise NopOverflow(longest - max_steps)
    return Gpu(g, layout.i_chunks, layout.o_chunks, slots.s_chunks(g), tuple(tbs))
