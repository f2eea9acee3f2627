"""``teccl verify`` for MSCCL++ execution plans: structure, pairing, execution, result.

What a valid report proves, for the plan as written: its structure is what the
executor's parser reads (keys, types, every index within its list, every chunk range
within its buffer, the executor's per-block limits); channels are declared in pairs and
NVLS groups by all their members; every rank's blocks run to the end in every order
(no deadlock), every signal is waited for and every semaphore returns to its initial
value; no read or write races another; and the final buffers hold what the collective
asks: every rank's pieces for AllGather, the sum of every rank's piece, each once, for
AllReduce and ReduceScatter, the piece meant for it for AllToAll.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from te_ccl.errors import SpecError
from te_ccl.outputs import check_input_file
from te_ccl.schedule import SCHEMA
from te_ccl.verify.mscclpp.execute import Loc, Value, execute
from te_ccl.verify.mscclpp.model import Plan, read_plan

__all__ = ["PlanReport", "verify_plan", "verify_plan_file", "is_plan_file", "plan_json"]

MAX_SHOWN = 20
MAX_PLAN_BYTES = 256 << 20  # larger is not a plan anyone loads: refused unread
MAX_UNITS = 1 << 22  # buffer units the symbolic run follows (a few hundred bytes each)
MAX_BLOCKS = 1 << 14  # thread blocks the run follows: a vector clock of 8 bytes per pair (2 GiB)


@dataclass
class PlanReport:
    MAX_SHOWN = MAX_SHOWN  # errors a report shows; the count says how many there are

    name: str = ""
    collective: str = ""
    ranks: int = 0
    blocks: int = 0
    ops: int = 0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {"format": "mscclpp", "valid": self.valid, "name": self.name,
                "collective": self.collective, "ranks": self.ranks, "threadblocks": self.blocks,
                "ops": self.ops, "errors": self.errors[:MAX_SHOWN],
                "error_count": len(self.errors), "notes": self.notes}


def is_plan_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts like a JSON object (an XML file starts with ``<``);
    False for what cannot be read, which the XML reader then reports."""
    if not os.path.isfile(path):  # a FIFO's open would block
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip()[:1] == b"{"


def verify_plan_file(path: str | os.PathLike) -> PlanReport:
    """:func:`verify_plan` of a file; :class:`SpecError` if it cannot be read."""
    check_input_file(path, limit=MAX_PLAN_BYTES)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SpecError(f"cannot read the file ({e.strerror})", file=str(path)) from None
    except UnicodeDecodeError:
        raise SpecError("not UTF-8 text", file=str(path)) from None
    data = plan_json(text, str(path))
    if isinstance(data, dict) and data.get("schema") == SCHEMA:
        raise SpecError("a teccl schedule, not an MSCCL++ plan (teccl simulate TOPOLOGY FILE "
                        "replays a schedule)", file=str(path))
    return check_plan(data)


def plan_json(text: str, file: str) -> Any:
    """The parsed JSON of a plan file's ``text``; :class:`SpecError` naming ``file``.
    ``NaN`` and ``Infinity`` are refused: they are not JSON, and the executor's parser
    stops at them."""

    def refuse(word: str) -> None:
        raise SpecError(f"not JSON ({word} is not a JSON number)", file=file)

    try:
        return json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as e:
        raise SpecError(f"not JSON ({e.msg} at line {e.lineno})", file=file) from None
    except RecursionError:
        raise SpecError("JSON nested too deeply", file=file) from None


def verify_plan(text: str) -> PlanReport:
    """Every error of the plan in ``text`` (valid when there is none)."""
    try:
        data = plan_json(text, "")
    except SpecError as e:
        return PlanReport(errors=[e.reason])
    return check_plan(data)


def check_plan(data: Any) -> PlanReport:
    """:func:`verify_plan` of the plan's parsed JSON."""
    report = PlanReport()
    plan = read_plan(data, report.errors)
    if plan is None:
        return report
    report.name, report.collective, report.ranks = plan.name, plan.collective, len(plan.gpus)
    report.blocks = sum(len(g.blocks) for g in plan.gpus)
    if report.errors:  # indices out of range: running would report the same thing again
        return report
    expect = _Expectation(plan)
    if expect.units > MAX_UNITS:
        report.errors.append(f"{expect.units:,} buffer units to follow (ranks times input and "
                             f"output chunks and their slices), more than the {MAX_UNITS:,} "
                             "the checker runs")
        return report
    if report.blocks > MAX_BLOCKS:
        report.errors.append(f"{report.blocks:,} thread blocks to follow, more than the "
                             f"{MAX_BLOCKS:,} the checker runs")
        return report
    outcome = execute(plan, expect.alias, expect.initial())
    report.ops = outcome.ops_run
    report.errors.extend(outcome.errors)
    if not any(e.startswith("deadlock") for e in outcome.errors):
        report.errors.extend(expect.check(outcome.memory, report.notes))
    return report


class _Expectation:
    """What each collective starts from and must end with, in units (chunks cut into
    the thread-block groups' slices); in place, input and output share memory."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.n = len(plan.gpus)
        self.L = plan.tbg_parts
        g = plan.gpus[0] if plan.gpus else None
        self.ic = g.chunks["i"] * self.L if g else 0
        self.oc = g.chunks["o"] * self.L if g else 0
        self.units = self.n * (self.ic + self.oc)  # what initial() and wanted() list

    def alias(self, loc: Loc) -> Loc:
        rank, buf, u = loc
        if not self.plan.inplace:
            return loc
        kind = self.plan.collective
        if kind == "allgather" and buf == "i":
            return (rank, "o", rank * self.ic + u)
        if kind == "reducescatter" and buf == "o":
            return (rank, "i", rank * self.oc + u)
        if kind in ("allreduce", "alltoall") and buf == "o":
            return (rank, "i", u)
        return loc

    def initial(self) -> dict[Loc, Value]:
        return {self.alias((r, "i", u)): ((r, u),) for r in range(self.n) for u in range(self.ic)}

    def wanted(self) -> dict[Loc, Value] | None:
        n, kind = self.n, self.plan.collective
        everyone = range(n)
        if kind == "allgather":
            return {(r, "o", q * self.ic + u): ((q, u),)
                    for r in everyone for q in everyone for u in range(self.ic)}
        if kind == "allreduce":
            return {(r, "o", u): tuple((q, u) for q in everyone)
                    for r in everyone for u in range(self.oc)}
        if kind == "reducescatter":
            return {(r, "o", u): tuple((q, r * self.oc + u) for q in everyone)
                    for r in everyone for u in range(self.oc)}
        if kind == "alltoall":
            c = self.ic // n if n else 0
            return {(r, "o", q * c + u): ((q, r * c + u),)
                    for r in everyone for q in everyone for u in range(c)}
        return None

    def check(self, memory: dict[Loc, Value], notes: list[str]) -> list[str]:
        wanted = self.wanted()
        if wanted is None:
            notes.append(f"no expected result for collective {self.plan.collective!r}: "
                         "structure, synchronization and races checked only")
            return []
        errors = []
        for loc, want in wanted.items():
            real = self.alias(loc)
            have = memory.get(real)
            if have != want:
                errors.append(f"rank {loc[0]} ends with {_show(have)} in o[unit {loc[2]}], "
                              f"expected {_show(want)}")
        return errors


def _show(v: Value | None) -> str:
    if v is None:
        return "nothing"
    if len(v) == 1:
        return f"rank {v[0][0]}'s input unit {v[0][1]}"
    return "the sum of " + ", ".join(f"r{r}:u{u}" for r, u in v)
