"""``verify_msccl``: every check on one MSCCL XML file, as one :class:`Report`.

Stages: the runtime reader's textual rules (:mod:`.text`, :mod:`.reader`), the runtime
parser's checks (:mod:`.runtime_rules`), the rules the runtime leaves unchecked
(:mod:`.static_rules`), then — unless an error makes the program's shape meaningless —
symbolic execution (:mod:`.execute`) in each mode the file declares (in-place,
out-of-place) and a comparison of the final buffers with the collective's definition
(:mod:`.layout`). Rooted collectives take the root from the caller or infer it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from te_ccl.deadline import check
from te_ccl.errors import SpecError
from te_ccl.nogc import paused_gc
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.verify.msccl.execute import Execution, judged
from te_ccl.verify.msccl.findings import RULES, Finding, Findings, finding
from te_ccl.verify.msccl.layout import GARBAGE, ROOTED, SUPPORTED, Layout
from te_ccl.verify.msccl.model import Algo
from te_ccl.verify.msccl.reader import MscclSyntaxError, parse_msccl, source_name
from te_ccl.verify.msccl.runtime_rules import runtime_checks
from te_ccl.verify.msccl.static_rules import static_checks
from te_ccl.verify.msccl.values import Packed, expand

__all__ = ["Report", "verify_msccl"]

_EXAMPLES = 3
_DOING = "verifying the MSCCL XML"


@dataclass(frozen=True)
class Report:
    """Outcome of :func:`verify_msccl`; ``valid`` when no finding is an error.

    ``findings`` holds the first :data:`~te_ccl.verify.msccl.findings.KEEP` findings of
    each rule, in the order found; ``counts`` how many each rule had in all."""

    source: str
    algo: Algo | None
    findings: tuple[Finding, ...]
    executed: bool = False
    root: int | None = None
    root_inferred: bool = False
    notes: tuple[str, ...] = field(default=())
    counts: dict[str, int] = field(default_factory=dict)
    runtime: str = MSCCL.name  # whose parser limits were applied (msccl, rccl)

    @property
    def valid(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def errors(self) -> list[Finding]:
        """The error findings kept (:attr:`error_count` counts them all)."""
        return [f for f in self.findings if f.severity == "error"]

    @property
    def error_count(self) -> int:
        return sum(n for rule, n in self.counts.items() if RULES[rule].severity == "error")

    @property
    def warning_count(self) -> int:
        return sum(self.counts.values()) - self.error_count

    def omitted(self) -> dict[str, int]:
        """Per rule, how many of its findings ``findings`` leaves out."""
        shown = Counter(f.rule for f in self.findings)
        return {rule: n - shown[rule] for rule, n in self.counts.items() if n > shown[rule]}

    def rules(self) -> set[str]:
        """Names of the rules with at least one finding (handy in tests)."""
        return set(self.counts)


def verify_msccl(path_or_text: str | Path, *, root: int | None = None,
                 max_steps: int = MSCCL.max_steps, slots: int | None = None,
                 read: Callable[[Algo], object] | None = None,
                 limits: RuntimeLimits = MSCCL) -> Report:
    """Check an MSCCL XML file (or XML text) completely, against the parser limits of
    the runtime ``limits`` describe (the MSCCL executor's, or RCCL's); ``slots``
    overrides the slots of a connection (``NCCL_STEPS``), whose calls take
    ``limits.call_slots(proto)`` each.
    ``read``, if given, hears the algorithm as soon as it is read (before any check), for
    a caller with more to do with it meanwhile.

    Raises
    ------
    MscclReadError
        The input is missing or not XML at all (exit code 2).
    SpecError
        ``root`` is not a rank of the algorithm.
    """
    with paused_gc():
        report = _verify(path_or_text, root, max_steps, slots, read, limits)
    return replace(report, runtime=limits.name)


def _verify(path_or_text: str | Path, root: int | None, max_steps: int,
            slots: int | None, read: Callable[[Algo], object] | None,
            limits: RuntimeLimits) -> Report:
    source = source_name(path_or_text)
    try:
        algo, found = parse_msccl(path_or_text)
    except MscclSyntaxError as e:
        return _report(source, None, e.findings)
    if root is not None and not 0 <= root < max(algo.ngpus, 1):
        raise SpecError(f"root {root} is not a rank of this {algo.ngpus}-GPU algorithm",
                        file=source, key="--root")
    if read is not None:
        read(algo)
    check(_DOING)
    found += runtime_checks(algo, max_steps=max_steps, limits=limits)
    found += static_checks(algo, max_steps=max_steps)
    check(_DOING)
    blocking = sorted(rule for rule in found.counts
                      if RULES[rule].severity == "error" and RULES[rule].blocks_execution)
    if blocking:
        note = f"not executed: fix {', '.join(blocking)} first"
        return _report(source, algo, found, notes=(note,))
    return _execute_modes(algo, found, source, root, slots, limits)


def _report(source: str, algo: Algo | None, found: Findings, **more) -> Report:
    return Report(source, algo, tuple(found), counts=dict(found.counts), **more)


def _execute_modes(algo: Algo, found: Findings, source: str, root: int | None,
                   slots: int | None, limits: RuntimeLimits) -> Report:
    modes = [m for m, on in ((True, algo.inplace), (False, algo.outofplace)) if on]
    notes = [] if modes else ["not executed: the file is neither in-place nor out-of-place"]
    if algo.coll not in SUPPORTED:
        notes.append(f"coll={algo.coll}: final buffers not checked (no fixed definition)")
    inferred = False
    seen = {(f.rule, f.gpu, f.tb, f.step) for f in found}
    for inplace in modes:
        layout = Layout(algo.coll, algo.ngpus, algo.nchunksperloop, inplace)
        problem = layout.problem() if algo.coll in SUPPORTED else None
        if problem:
            found.append(finding("chunk-layout", problem))
            break
        ran, root, now = judged(algo, layout, partial(_judge, algo, layout, root),
                                slots=slots, limits=limits)
        inferred = inferred or now
        check(_DOING)
        extra = _sizes(algo, layout) + ran
        mode = "in-place" if inplace else "out-of-place"
        for f in extra:
            key = (f.rule, f.gpu, f.tb, f.step)
            if key not in seen:
                seen.add(key)
                found.append(_tag(f, mode) if len(modes) > 1 else f)
    found = found.replaced(_with_lines(algo, found))
    if inferred:
        notes.append(f"root {root} inferred from the data flow (pass --root to fix it)")
    return _report(source, algo, found, executed=bool(modes), root=root,
                   root_inferred=inferred, notes=tuple(notes))


def _judge(algo: Algo, layout: Layout, root: int | None, run: Execution
           ) -> tuple[list[Finding], int | None, bool]:
    """What the execution ``run`` found, with the root inferred if none was given (the
    root, and whether it was inferred), and the final buffers compared with the
    collective's definition."""
    found, inferred = list(run.findings), False
    if algo.coll in ROOTED and root is None and run.completed:
        root, inferred, why = _infer_root(layout, run)
        if why:
            found.append(finding("root", why))
    if run.completed and algo.coll in SUPPORTED and (root is not None
                                                     or algo.coll not in ROOTED):
        found += _compare(algo, layout, run, root)
    return found, root, inferred


def _sizes(algo: Algo, layout: Layout) -> list[Finding]:
    if algo.coll not in SUPPORTED:
        return []
    cap = layout.capacity()
    return [finding("buffer-size", f"{buf}_chunks={gpu.chunks(buf)} but {algo.coll} with "
                    f"nchunksperloop={algo.nchunksperloop} gives rank {gpu.id} only {cap[buf]}",
                    gpu=gpu.id, line=gpu.line)
            for gpu in algo.gpus for buf in ("i", "o") if gpu.chunks(buf) > cap[buf]]


def _with_lines(algo: Algo, found: Findings) -> list[Finding]:
    """Give execution findings the line of the step (or thread block) they name."""
    tbs = {(g.id, t.id): t for g in algo.gpus for t in g.threadblocks}
    out = []
    for f in found:
        tb = tbs.get((f.gpu, f.tb)) if f.line is None and f.tb is not None else None
        if tb is not None:
            line = tb.line if f.step is None else (
                tb.steps[f.step].line if 0 <= f.step < len(tb.steps) else None)
            f = Finding(f.rule, f.message, f.gpu, f.tb, f.step, line, f.severity)
        out.append(f)
    return out


def _tag(f: Finding, mode: str) -> Finding:
    return Finding(f.rule, f"[{mode}] {f.message}", f.gpu, f.tb, f.step, f.line, f.severity)


def _infer_root(layout: Layout, run: Execution) -> tuple[int | None, bool, str | None]:
    candidates = layout.root_candidates(run.value)
    if len(candidates) == 1:
        return candidates[0], True, None
    if not candidates:
        return None, False, "cannot infer the root: no rank's data reaches another rank"
    return None, False, f"cannot infer the root: ranks {candidates} all look like roots"


def _compare(algo: Algo, layout: Layout, run: Execution, root: int | None) -> list[Finding]:
    """One finding per GPU whose final buffers differ from the collective's definition."""
    found = []
    for gpu in algo.gpus:
        if run.holds(gpu.id, *layout.expected_run(gpu.id, root)):
            continue   # every chunk right, seen in one comparison
        wrong = [(slot, got, want)
                 for slot, want in sorted(layout.expected_packed(gpu.id, root).items())
                 if (got := run.value(gpu.id, slot)) != want]
        if not wrong:
            continue
        ref = run.writer(gpu.id, wrong[0][0])
        examples = "; ".join(f"{s[0]}[{s[1]}] holds {_describe(g)} but needs {_describe(w)}"
                             for s, g, w in wrong[:_EXAMPLES])
        more = f" (and {len(wrong) - _EXAMPLES} more)" if len(wrong) > _EXAMPLES else ""
        found.append(finding(
            "wrong-result", f"{len(wrong)} output chunk(s) of {algo.coll} are wrong: "
            f"{examples}{more}", gpu=gpu.id, tb=ref[1] if ref else None,
            step=ref[2] if ref else None))
    return found


def _describe(packed: Packed | None) -> str:
    """Human form of a symbolic value: ``i[3] of rank 1`` or ``Σ i[3] of ranks 0,1,2``."""
    if packed is None:
        return "nothing"
    value = expand(packed)
    if any(part in GARBAGE for part in value):
        return "garbage"
    if len(value) == 1:
        return f"i[{value[0][1]}] of rank {value[0][0]}"
    index = {k for _, k in value}
    ranks = ",".join(str(r) for r, _ in value)
    if len(index) == 1:
        return f"Σ i[{index.pop()}] of ranks {ranks}"
    return "Σ " + " + ".join(f"i[{k}]@{r}" for r, k in value)
