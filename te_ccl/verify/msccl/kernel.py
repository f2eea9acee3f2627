"""A thread block as the runtime's kernel runs it: transmissions, waits and flag values.

The parser does not keep steps one to one. It folds every ``nop`` into the next real
step (the nops' dependencies become that step's waits), fuses consecutive ``re`` steps
with the same destination and source buffer (and no dependency of their own) into one
multi-source reduction, and the kernel keeps its own step counter: it advances by the
number of waits (so nops are counted only if they carry a dependency) and by the number
of fused reductions. A step with ``hasdep="1"`` publishes that counter as its thread
block's flag; a waiter on ``(depid, deps)`` proceeds once the flag is ``>= deps``.
Executing these transmissions instead of the raw steps makes the symbolic execution
behave like the GPUs even for files that break the rules.

>>> from te_ccl.verify.msccl.model import Step, Threadblock
>>> def st(pos, type, dep=-1, hasdep=0, off=0):
...     return Step(pos, type, "s", off, "i", 0, 1, dep, 0 if dep >= 0 else -1, hasdep, pos)
>>> tb = Threadblock(0, -1, -1, 0, (st(0, "nop", dep=1), st(1, "re", dep=2), st(2, "re", off=1, hasdep=1)))
>>> [(t.positions, t.deps, t.flag) for t in transmissions(tb)]
[((1, 2), ((1, 0), (2, 0)), 2)]
"""

from __future__ import annotations

from typing import NamedTuple

from te_ccl.runtime_limits import MSCCL
from te_ccl.verify.msccl.model import STEP_TYPES, Step, Threadblock

__all__ = ["Transmission", "transmissions", "orphan_waits"]

# without nops (folded into the next step) and re (fused): one transmission per step, whose
# kernel step counter is its position
_ONE_TO_ONE = frozenset(STEP_TYPES) - {"nop", "re"}
_FOLDABLE = _ONE_TO_ONE | {"nop"}  # without fusion: one transmission per step but nops


class Transmission(NamedTuple):
    """One unit of kernel work: ``steps`` (several only for fused ``re``), its waits, flag.

    ``flag`` is the kernel's step counter when it finishes (published if ``hasdep``);
    ``orphan_wait`` is True when nops' waits were attached to a step without its own
    dependency (the parser's "chain of dependencies" error).
    """

    steps: tuple[Step, ...]
    deps: tuple[tuple[int, int], ...]
    hasdep: bool
    flag: int
    orphan_wait: bool = False

    @property
    def first(self) -> Step:
        return self.steps[0]

    @property
    def type(self) -> str:
        return self.steps[0].type

    @property
    def cnt(self) -> int:
        return self.steps[-1].cnt  # the parser overwrites the count with each fused step's

    @property
    def positions(self) -> tuple[int, ...]:
        return tuple(s.position for s in self.steps)


_new = tuple.__new__  # builds a Transmission without its keyword-parsing constructor


def transmissions(tb: Threadblock) -> list[Transmission]:
    """The thread block's transmissions in order, built the way the runtime's parser does."""
    kinds = {step[1] for step in tb.steps}  # step[1]: its type
    if not kinds <= _ONE_TO_ONE:
        return _folded(tb.steps) if kinds <= _FOLDABLE else _grouped(tb)
    program = []   # the common case, 3x faster; steps unpacked: faster than by name
    for i, step in enumerate(tb.steps):
        _, _, _, _, _, _, _, depid, deps, hasdep, _, _ = step
        program.append(_new(Transmission, ((step,), ((depid, deps),) if depid >= 0 else (),
                                           hasdep != 0, i, False)))
    return program


def _folded(steps: tuple[Step, ...]) -> list[Transmission]:
    """:func:`_grouped` of steps of one-to-one types and nops (no reduction to fuse): in
    one pass, as many a lowered file's thread blocks are (a nop carries a step's extra
    dependencies)."""
    program: list[Transmission] = []
    pending: list[tuple[int, int]] = []
    counter = 0
    for step in steps:
        _, kind, _, _, _, _, _, depid, deps, hasdep, _, _ = step  # unpacked: faster
        if depid >= 0:
            pending.append((depid, deps))
        if kind == "nop":
            continue
        if pending:
            counter += len(pending) - 1
            program.append(_new(Transmission, ((step,), tuple(pending), hasdep != 0,
                                               counter, depid < 0)))
            pending = []
        else:
            program.append(_new(Transmission, ((step,), (), hasdep != 0, counter, False)))
        counter += 1
    return program


def orphan_waits(tb: Threadblock) -> set[int]:
    """Positions of the steps that the parser gives nops' waits although they have no
    dependency of their own (:attr:`Transmission.orphan_wait`).

    Such a step needs a nop (or unknown step) with a dependency before it and no step with
    a dependency in between; a thread block without that pattern (every file teccl
    writes) is answered from one pass over its steps, without grouping it."""
    pending = False
    for _, kind, _, _, _, _, _, depid, _, _, _, _ in tb.steps:  # faster than by name
        if kind == "nop" or kind not in STEP_TYPES:
            pending = pending or depid >= 0
        elif depid >= 0:
            pending = False
        elif pending:
            return {t.first.position for t in _grouped(tb) if t.orphan_wait}
    return set()


def _grouped(tb: Threadblock) -> list[Transmission]:
    """:func:`transmissions` of a thread block with nops, reductions or unknown types."""
    groups: list[tuple[list[Step], tuple[tuple[int, int], ...], bool]] = []
    pending: list[tuple[int, int]] = []
    chain: tuple[str, int, str] | None = None   # (dstbuf, dstoff, srcbuf) of an open re chain
    reductions = 0                               # the parser counts re steps per thread block
    for step in tb.steps:
        _, kind, srcbuf, _, dstbuf, dstoff, _, depid, deps, hasdep, _, _ = step  # fast
        if depid >= 0:
            pending.append((depid, deps))
        if kind == "nop" or kind not in STEP_TYPES:
            continue
        if kind != "re":
            groups.append(([step], tuple(pending), bool(pending) and depid < 0))
            pending, chain = [], None
            continue
        key = (dstbuf, dstoff, srcbuf)
        if chain == key and depid == -1 and groups:
            groups[-1][0].append(step)
        else:
            groups.append(([step], tuple(pending), bool(pending) and depid < 0))
            pending = []
        reductions += 1
        chain = None if hasdep or reductions == MSCCL.max_reduce_fusion else key
    return _with_flags(groups)


def _with_flags(groups: list[tuple[list[Step], tuple[tuple[int, int], ...], bool]]
                ) -> list[Transmission]:
    """Replay the kernel's step counter (msccl kernel: ``step += numDependencies-1`` ...)."""
    counter = 0
    result = []
    for steps, deps, orphan in groups:
        if deps:
            counter += len(deps) - 1
        if steps[0].type == "re" and steps[-1].cnt > 0:
            counter += len(steps) - 1
        result.append(_new(Transmission, (tuple(steps), deps, steps[-1].hasdep != 0, counter,
                                          orphan)))
        counter += 1
    return result
