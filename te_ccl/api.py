"""The Python API: compile a collective from a script or a notebook, as ``teccl compile`` does.

``teccl compile`` is a thin layer over :func:`compile` (flags in, table or JSON out), so
both take the same inputs, refuse the same bad ones (:class:`~te_ccl.errors.SpecError`
and its exit-code siblings, never a print or an exit) and return the same
:class:`~te_ccl.compiler.result.CompileResult`, whose ``as_dict()`` is the very object
``teccl compile --json`` prints (each of its keys also an attribute).

>>> import te_ccl
>>> result = te_ccl.compile("ring8", "allgather", size="1MB", time_limit_s=20)
>>> result.schedule.collective.nranks, result.output is None
(8, True)
>>> result.finish_time_s >= result.lower_bound_s > 0
True
>>> result.bound_ratio == result.as_dict()["bound_ratio"] >= 1
True
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from te_ccl.backends.base import SolveParams
from te_ccl.backends.select import strategy_for
from te_ccl.collective.model import Collective
from te_ccl.compiler import (
    BASE_CHUNKS,
    CompileOptions,
    CompileResult,
    check_plan_kind,
    compile_collective,
    compile_size_library,
    output_format,
    parse_size_range,
    read_previous,
)
from te_ccl.deadline import until
from te_ccl.errors import SpecError
from te_ccl.outputs import check_output_dir, check_output_file
from te_ccl.runtime_limits import RUNTIMES
from te_ccl.spec.collective import load_collective
from te_ccl.spec.topology import load_topology
from te_ccl.topology.model import Topology
from te_ccl.units import UnitError, parse_time

if TYPE_CHECKING:
    from te_ccl.compiler import Previous

__all__ = ["compile", "solve_params", "CompileResult"]


def solve_params(*, backend: str = "auto", time_limit_s: float = 60.0, threads: int = 1,
                 seed: int = 0, epoch: str | float = "fastest",
                 max_horizon: int | None = None) -> SolveParams:
    """The solver settings, with ``epoch`` as ``fastest``, ``slowest``, seconds or a time
    such as ``"1us"``."""
    if isinstance(epoch, str) and epoch not in ("fastest", "slowest"):
        try:
            epoch = parse_time(epoch)
        except UnitError as e:
            raise SpecError(str(e), key="epoch") from None
    return SolveParams(backend=backend, time_limit_s=time_limit_s, threads=threads, seed=seed,
                       epoch=epoch, max_horizon=max_horizon)


def compile(  # noqa: A001 - te_ccl.compile is the name users look for
        topology: str | os.PathLike | Topology,
        collective: str | Collective | None = None, *,
        spec: str | os.PathLike | None = None,
        size: str | int | None = None,
        chunks: int | Literal["auto"] | None = None,
        ranks: str | None = None,
        root: str | int | None = None,
        inplace: bool | None = None,
        proto: str | None = None,
        backend: str = "auto",
        time_limit_s: float = 60.0,
        threads: int = 1,
        seed: int = 0,
        epoch: str | float = "fastest",
        max_horizon: int | None = None,
        output: str | os.PathLike | None = None,
        fmt: Literal["xml", "json", "mscclpp"] | None = None,
        fred_tables: str | os.PathLike | None = None,
        previous: str | os.PathLike | None = None,
        runtime: Literal["msccl", "rccl"] = "msccl",
        sizes: str | tuple[int, int] | None = None,
        progress: Callable[[str], None] | None = None) -> CompileResult | list[CompileResult]:
    """Solve, check, lower and (with ``output``) write one algorithm, or with ``sizes``
    one per message-size range.

    ``topology``: a shipped name (``"dgx1"``), a YAML file or a :class:`Topology`.
    ``collective``: a kind (``"allgather"``, ``"broadcast"``, …) or a
    :class:`Collective`; ``spec`` a collective YAML file, whose keys the keyword
    arguments override (``size`` as ``"64MB"`` or bytes; ``chunks`` per rank or
    ``"auto"``; ``ranks`` as ``"0-7"``; rooted kinds default to the first rank).
    ``output``: a file to write (``.xml`` MSCCL or ``.json`` schedule; ``"-"`` stdout;
    ``fmt="mscclpp"``: an MSCCL++ execution plan); None writes nothing. ``previous``: the
    MSCCL XML an earlier compile wrote for this collective on a network that has changed
    since (a link gone or slower); its routes, rerouted where a link is gone, make the
    first file (with ``output`` and ``backend`` auto). ``runtime``: whose executor loads the
    XML, ``"msccl"`` (the MSCCL executor) or ``"rccl"`` (RCCL's, 64 thread blocks per GPU):
    the file is lowered within its limits and verified against them. ``sizes``
    (``"1KB..1GB"`` or ``(low, high)`` in bytes): one algorithm per size range, with the
    ``minBytes``/``maxBytes`` of its range, written into the directory ``output``
    (:func:`te_ccl.compiler.compile_size_library`; each range is compiled at its own size,
    so a spec file's or a Collective's size is overridden); the result is then their
    list, and ``size``, ``fred_tables``, ``previous`` and ``fmt="mscclpp"`` are refused
    (each is one algorithm's). ``progress`` receives short status messages.

    Raises :class:`~te_ccl.errors.SpecError` for bad input,
    :class:`~te_ccl.errors.SolverError` or :class:`~te_ccl.errors.RuntimeLimitError`
    when no schedule is found or fits the runtime.
    """
    if runtime not in RUNTIMES:
        raise SpecError(f"expected one of {', '.join(RUNTIMES)}, got {runtime!r}",
                        key="runtime")
    topo = _topology(topology)
    chunk_choices, chunks = _chunking(chunks)
    span = None if sizes is None else _size_span(sizes, size, output, fred_tables, previous)
    if span is not None and not isinstance(collective, Collective):
        size = span[1]  # the collective is checked at the largest size
    coll = _collective(topo, collective, spec, size=size, chunks=chunks, ranks=ranks,
                       root=root, inplace=inplace, proto=proto)
    fmt = _file_format(topo, coll, output, fmt, fred_tables, runtime, previous, span)
    params = solve_params(backend=backend, time_limit_s=time_limit_s, threads=threads,
                          seed=seed, epoch=epoch, max_horizon=max_horizon)
    if span is not None:  # the limit is the library's, shared among its ranges
        with until(time_limit_s):
            return compile_size_library(topo, coll, params, *span, str(output), fmt=fmt,
                                        chunk_choices=chunk_choices, progress=progress,
                                        runtime=RUNTIMES[runtime])
    options = CompileOptions(output=None if output is None else str(output), fmt=fmt,
                             fred_tables=None if fred_tables is None else str(fred_tables),
                             chunk_choices=chunk_choices,
                             previous=_previous(previous, topo, coll, output, params),
                             runtime=RUNTIMES[runtime])
    with until(time_limit_s):  # the compile keeps the end of it for the FRED tables
        return compile_collective(topo, coll, params, options, progress)


def _chunking(chunks: int | Literal["auto"] | None
              ) -> tuple[tuple[int, ...], int | None]:
    """The chunk counts ``--chunks auto`` tries (none for a count given) and the chunks
    per rank the collective is checked at."""
    if chunks == "auto":
        return BASE_CHUNKS, 1
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int)):
        raise SpecError(f"expected a positive integer or auto, got {chunks!r}", key="chunks")
    return (), chunks


def _file_format(topo: Topology, coll: Collective, output: str | os.PathLike | None,
                 fmt: str | None, fred_tables: str | os.PathLike | None, runtime: str,
                 previous: object, span: tuple[int, int] | None) -> str:
    """The format of the file to write, once the places it goes to are writable and the
    runtime and collective can take that format (checked before any solve)."""
    if output is not None and span is None:
        check_output_file(output, key="output")
    if fred_tables is not None:
        check_output_dir(fred_tables, key="fred_tables")
    fmt = output_format(None if output is None else str(output), fmt, topo.reducing_switches)
    if runtime != "msccl" and fmt != "xml":
        raise SpecError(f"the {runtime} runtime loads MSCCL XML, not {fmt}", key="runtime")
    if fmt == "mscclpp":
        _check_plan_kind(coll, previous, span)
    return fmt


def _check_plan_kind(coll: Collective, previous: object, span: tuple[int, int] | None
                     ) -> None:
    """Refuse, before solving, what an MSCCL++ plan cannot be written for."""
    if span is not None:
        raise SpecError("size libraries are MSCCL XML or schedule JSON; compile one size for "
                        "an MSCCL++ plan (its min/max message size cover every size)",
                        key="fmt")
    check_plan_kind(coll.kind.value, coll.proto)
    if previous is not None:
        raise SpecError("a previous MSCCL XML seeds XML compiles, not MSCCL++ plans",
                        key="previous")


def _size_span(sizes: str | tuple[int, int], size: object, output: object,
               fred_tables: object, previous: object) -> tuple[int, int]:
    """``sizes`` as ``(low, high)`` bytes, refusing what belongs to one algorithm (a
    ``size`` beside them would say which of the library's sizes the user meant: none)."""
    if isinstance(sizes, str):
        span = parse_size_range(sizes)
    elif (isinstance(sizes, tuple) and len(sizes) == 2
          and all(isinstance(x, int) and not isinstance(x, bool) for x in sizes)
          and 0 < sizes[0] <= sizes[1]):
        span = sizes
    else:
        raise SpecError(f"expected LOW..HIGH such as 1KB..1GB or two byte counts 0 < LOW <= "
                        f"HIGH, got {sizes!r}", key="sizes")
    if size is not None:
        raise SpecError("sizes compiles each range at its own size; expected no size "
                        "beside it", key="size")
    for name, given in (("fred_tables", fred_tables), ("previous", previous)):
        if given is not None:
            raise SpecError(f"{name} is one algorithm's; a size library takes none",
                            key=name)
    if output is None or str(output) == "-":
        raise SpecError("a size library is written into a directory: expected one",
                        key="output")
    check_output_dir(output, key="output")
    return span


def _previous(previous: str | os.PathLike | None, topo: Topology, coll: Collective,
              output: str | os.PathLike | None, params: SolveParams) -> Previous | None:
    """The previous file, read and checked against ``coll`` (a compile that writes a file
    with the ``auto`` portfolio starts from it)."""
    if previous is None:
        return None
    if output is None or strategy_for(params) != "portfolio":
        raise SpecError("a previous file seeds a compile that writes a file with the auto "
                        "backend; expected an output and backend auto without max_horizon",
                        key="previous")
    return read_previous(str(previous), coll, topo)


def _topology(topology: str | os.PathLike | Topology) -> Topology:
    if isinstance(topology, Topology):
        return topology
    return load_topology(str(topology))


def _collective(topo: Topology, collective: str | Collective | None,
                spec: str | os.PathLike | None, **flags: object) -> Collective:
    given = {k: v for k, v in flags.items() if v is not None}
    if isinstance(collective, Collective):
        if spec is not None or set(given) - {"chunks"}:
            raise SpecError("a Collective object takes no spec file or collective keywords "
                            f"(got {', '.join(sorted(given)) or 'spec'})", key="collective")
        if "chunks" in given:
            from dataclasses import replace

            return replace(collective, chunks_per_rank=given["chunks"])
        return collective
    if collective is not None:
        given["collective"] = collective
    if isinstance(given.get("size"), int):
        given["size"] = f"{given['size']}B"
    if "root" in given:
        given["root"] = str(given["root"])
    return load_collective(topo, None if spec is None else str(spec), **given)
