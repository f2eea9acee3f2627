"""The whole compile in one readable function: spec → solve → check → lower → verify → write.

``compile_collective`` is what ``teccl compile`` and ``teccl sweep`` run for each
algorithm. Every output is checked before it is written: the schedule by the
independent checker, the MSCCL XML by the verifier, which shares nothing with the solver.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from te_ccl.backends.base import Progress, SolveParams
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective
from te_ccl.errors import SolverError, SpecError, VerificationError
from te_ccl.outputs import write_atomic
from te_ccl.schedule import Schedule
from te_ccl.solve import solve
from te_ccl.topology.model import Topology
from te_ccl.verify.schedule_check import check_schedule

__all__ = ["CompileOptions", "CompileResult", "compile_collective", "compile_size_library",
           "summary"]

FORMATS = ("xml", "json")


@dataclass(frozen=True)
class CompileOptions:
    """Where and how to write: ``output`` None writes nothing, ``"-"`` writes stdout.

    ``chunk_choices``: chunks-per-rank values to try (the time limit is shared among them);
    the fastest schedule wins, ties going to fewer chunks. Empty: the collective's own.
    """

    output: str | None = None
    fmt: str = "xml"
    min_bytes: int = 0
    max_bytes: int = 0
    name: str | None = None
    fred_tables: str | None = None
    chunk_choices: tuple[int, ...] = ()


@dataclass(frozen=True)
class CompileResult:
    schedule: Schedule
    lower_bound_s: float
    bound_parts: dict[str, float]
    output: str | None
    extra_outputs: tuple[str, ...] = field(default=())
    min_bytes: int = 0
    max_bytes: int = 0


def compile_collective(topology: Topology, collective: Collective, params: SolveParams,
                       options: CompileOptions = CompileOptions(),
                       progress: Progress | None = None) -> CompileResult:
    """Solve, check, lower and write one algorithm; raises instead of writing a bad file."""
    schedule = _solve_checked(topology, collective, params, options.chunk_choices, progress)
    bound = lower_bound(topology, schedule.collective)
    extra: tuple[str, ...] = ()
    if options.output is not None:
        data = _render(schedule, options)
        write_atomic(options.output, data)
    if options.fred_tables is not None:
        extra = _write_fred_tables(schedule, topology, options.fred_tables)
    return CompileResult(schedule, bound.seconds, dict(bound.parts), options.output, extra,
                         options.min_bytes, options.max_bytes)


def compile_size_library(topology: Topology, collective: Collective, params: SolveParams,
                         low: int, high: int, out_dir: str, *, fmt: str = "xml",
                         chunk_choices: tuple[int, ...] = (),
                         progress: Progress | None = None) -> list[CompileResult]:
    """One algorithm per size range of ``[low, high]`` written to ``out_dir``, as MSCCL
    algorithm libraries ship them: each file's ``minBytes``/``maxBytes`` cover its range, so
    the runtime picks the one compiled for the message size at hand."""
    from te_ccl.report.sizes import compile_size_ranges

    unit = max(replace(collective, chunks_per_rank=k).nchunks
               for k in chunk_choices or (collective.chunks_per_rank,))

    def compile_one(c: Collective) -> Schedule:
        c = replace(c, size_bytes=max(unit, c.size_bytes // unit * unit))
        if progress:
            progress(f"compiling for {c.size_bytes} bytes")
        return _solve_checked(topology, c, params, chunk_choices, progress)

    results = []
    for item in compile_size_ranges(collective, low, high, compile_one):
        name = f"{topology.name}-{collective.kind.value}-{item.min_bytes}-{item.max_bytes}"
        options = CompileOptions(output=str(Path(out_dir) / f"{name}.{fmt}"), fmt=fmt,
                                 min_bytes=item.min_bytes, max_bytes=item.max_bytes, name=name)
        write_atomic(options.output, _render(item.schedule, options))
        bound = lower_bound(topology, item.schedule.collective)
        results.append(CompileResult(item.schedule, bound.seconds, dict(bound.parts),
                                     options.output, min_bytes=item.min_bytes,
                                     max_bytes=item.max_bytes))
    return results


def _solve_checked(topology: Topology, collective: Collective, params: SolveParams,
                   chunk_choices: tuple[int, ...], progress: Progress | None) -> Schedule:
    schedule = (_best_chunking(topology, collective, params, chunk_choices, progress)
                if chunk_choices else solve(topology, collective, params, progress))
    violations = check_schedule(schedule)
    if violations:
        first = violations[0]
        raise VerificationError(f"schedule check failed ({len(violations)} violation(s)); "
                                f"first: [{first.rule}] {first.message}")
    return schedule


def _best_chunking(topology: Topology, collective: Collective, params: SolveParams,
                   choices: tuple[int, ...], progress: Progress | None) -> Schedule:
    """Solve once per chunking that divides the size; keep the earliest finish."""
    candidates = [replace(collective, chunks_per_rank=k) for k in sorted(set(choices))]
    candidates = [c for c in candidates if c.size_bytes % c.nchunks == 0]
    if not candidates:
        raise SpecError(f"none of the chunkings {sorted(set(choices))} divides "
                        f"{collective.size_bytes} bytes", key="--chunks")
    share = replace(params, time_limit_s=params.time_limit_s / len(candidates))
    best: Schedule | None = None
    tried: list[str] = []
    spent = 0.0
    last_error: SolverError | None = None
    for c in candidates:
        if progress:
            progress(f"trying {c.chunks_per_rank} chunk(s) per rank")
        try:
            s = solve(topology, c, share, progress)
        except SolverError as e:
            tried.append(f"{c.chunks_per_rank}: {e}")
            last_error = e
            continue
        spent += s.info.solver_time_s
        tried.append(f"{c.chunks_per_rank}: {s.finish_time_s:.4g}s")
        if best is None or s.finish_time_s < best.finish_time_s * (1 - 1e-9):
            best = s
    if best is None:
        raise last_error
    note = (f"chunks auto: picked {best.collective.chunks_per_rank} per rank "
            f"(tried {'; '.join(tried)})")
    return best.with_info(notes=best.info.notes + (note,), solver_time_s=spent)


def _render(schedule: Schedule, options: CompileOptions) -> bytes:
    if options.fmt == "json":
        return schedule.to_json().encode()
    from te_ccl.lower.msccl import lower_to_msccl
    from te_ccl.verify.msccl.verify import verify_msccl

    xml = lower_to_msccl(schedule, name=options.name, min_bytes=options.min_bytes,
                         max_bytes=options.max_bytes)
    coll = schedule.collective
    root = coll.ranks.index(coll.root) if coll.root is not None else None
    report = verify_msccl(xml.decode(), root=root)
    if not report.valid:
        errors = report.errors
        raise VerificationError(f"the lowered MSCCL XML failed verification "
                                f"({len(errors)} error(s)); first: {errors[0]}")
    return xml


def _write_fred_tables(schedule: Schedule, topology: Topology, out_dir: str) -> tuple[str, ...]:
    from te_ccl.fred.collectives import fred_tables_for

    return tuple(str(p) for p in fred_tables_for(schedule, topology, Path(out_dir)))


def summary(result: CompileResult, topology: Topology) -> dict[str, Any]:
    """The ``--json`` object of ``teccl compile`` (keys fixed by PRODUCT.md's contract)."""
    s, c = result.schedule, result.schedule.collective
    finish = s.finish_time_s
    algbw = c.size_bytes / finish / 1e9 if finish > 0 else None
    return {
        "topology": topology.name,
        "collective": c.kind.value,
        "ngpus": c.nranks,
        "size_bytes": c.size_bytes,
        "chunks_per_rank": c.chunks_per_rank,
        "inplace": c.inplace,
        "backend": s.info.backend,
        "solver_time_s": round(s.info.solver_time_s, 4),
        "epochs": s.finish_epoch,
        "epoch_s": s.epoch_s,
        "finish_time_s": finish,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * c.busbw_factor if algbw is not None else None,
        "lower_bound_s": result.lower_bound_s,
        "bound_ratio": finish / result.lower_bound_s if result.lower_bound_s > 0 else None,
        "optimal": s.info.optimal,
        "status": s.info.status,
        "variables": s.info.variables,
        "constraints": s.info.constraints,
        "notes": list(s.info.notes),
        "transfers": len(s.transfers),
        "min_bytes": result.min_bytes,
        "max_bytes": result.max_bytes,
        "output": result.output,
        "extra_outputs": list(result.extra_outputs),
    }
