"""``teccl compile``: topology + collective → verified MSCCL XML (or JSON) and a summary."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click
from rich.table import Table

from te_ccl.backends.base import BACKENDS, SolveParams
from te_ccl.backends.select import strategy_for
from te_ccl.cli.common import (
    collective_flags,
    collective_options,
    emit_json,
    err_console,
    plain_progress,
    progress_status,
    table_console,
)
from te_ccl.deadline import TimeLimitReached, until
from te_ccl.errors import SpecError
from te_ccl.outputs import check_output_dir, check_output_file, path_component
from te_ccl.topology.model import Topology
from te_ccl.units import format_bandwidth, format_size, format_time

if TYPE_CHECKING:
    from te_ccl.backends.base import Progress
    from te_ccl.collective import Collective
    from te_ccl.compiler import CompileResult


@click.command("compile")
@click.argument("topology")
@click.argument("spec", required=False, type=click.Path(dir_okay=False))
@collective_options
@click.option("--backend", type=click.Choice(BACKENDS), default="auto",
              show_default=True, help="Solver backend; auto picks by model size.")
@click.option("--time-limit", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="Wall-clock limit for the whole compile: a fifth is kept for "
              "lowering, verifying and writing the schedule found.")
@click.option("--threads", type=int, default=1, show_default=True, help="Solver threads.")
@click.option("--seed", type=int, default=0, show_default=True, help="Solver random seed.")
@click.option("--epoch", default="fastest", show_default=True, metavar="POLICY",
              help="Epoch duration: fastest, slowest, or a time such as 1us.")
@click.option("--max-horizon", type=int, metavar="EPOCHS", help="Largest finish epoch to try.")
@click.option("-o", "--output", metavar="OUT", help="Output file; '-' for stdout "
              "(default TOPOLOGY-COLLECTIVE.xml).")
@click.option("--format", "fmt", type=click.Choice(["xml", "json", "mscclpp"]), default=None,
              help="Output format (default from the file suffix, else xml); mscclpp: an "
              "MSCCL++ execution plan (docs/runtimes.md).")
@click.option("--runtime", type=click.Choice(["msccl", "rccl"]), default="msccl",
              show_default=True, help="Whose executor loads the XML: its limits are kept "
              "and verified (rccl: 64 thread blocks per GPU; docs/runtimes.md).")
@click.option("--sizes", metavar="LOW..HIGH", help="One algorithm per size range (e.g. "
              "1KB..1GB) with matching minBytes/maxBytes; -o is then a directory.")
@click.option("--fred-tables", metavar="DIR", help="Also write FRED switch tables to DIR.")
@click.option("--from", "previous", metavar="XML", help="Start from the MSCCL XML an "
              "earlier compile wrote for this collective before the network changed.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary on stdout.")
@click.option("--jobs", metavar="FILE", help="Compile the jobs of FILE jointly on the shared "
              "links, one file per job in the directory -o (docs/shared-clusters.md).")
@click.option("--objective", type=click.Choice(["max", "weighted"]), default="weighted",
              show_default=True, help="With --jobs: the makespan or the weighted sum of "
              "the jobs' finish times.")
def compile_cmd(topology: str, spec: str | None, **kw) -> None:
    """Compile a collective on TOPOLOGY (a shipped name or a YAML file)."""
    from te_ccl.spec.collective import load_collective
    from te_ccl.spec.topology import load_topology

    if kw["jobs"]:
        _compile_jobs(load_topology(topology), spec, kw)
        return
    flags, auto_chunks = collective_flags(kw)
    sizes = None
    if kw["sizes"]:
        from te_ccl.compiler import parse_size_range

        sizes = parse_size_range(kw["sizes"])
        if "size" in flags:
            raise SpecError("--sizes compiles each range at its own size; expected no "
                            "--size beside it", key="--size")
        flags["size"] = sizes[1]  # the collective is checked at the largest size
    topo = load_topology(topology)
    coll = load_collective(topo, spec, **flags)
    output, fmt = _output(kw["output"], kw["fmt"], topo, coll.kind.value, sizes is not None)
    if output == "-" and (kw["as_json"] or sizes):
        raise SpecError("-o - needs a single algorithm and no --json (both use stdout)",
                        key="--output")
    if sizes is None:
        check_output_file(output, key="--output")
    else:
        check_output_dir(output, key="--output")
    if kw["fred_tables"]:
        if sizes:
            raise SpecError("FRED switch tables are one algorithm's; expected no --sizes",
                            key="--fred-tables")
        check_output_dir(kw["fred_tables"], key="--fred-tables")
    if kw["previous"] and (sizes or strategy_for(SolveParams(
            backend=kw["backend"], max_horizon=kw["max_horizon"])) != "portfolio"):
        raise SpecError("a previous file seeds one algorithm of the auto backend; expected no "
                        "--sizes and --backend auto without --max-horizon", key="--from")
    solver = {"backend": kw["backend"], "time_limit_s": kw["time_limit"],
              "threads": kw["threads"], "seed": kw["seed"], "epoch": kw["epoch"],
              "max_horizon": kw["max_horizon"]}
    try:
        # the time limit is the whole command's, counted from its start (--sizes: shared
        # among the ranges)
        since = (click.get_current_context().obj or {}).get("started")
        with until(kw["time_limit"], since), progress_status("solving…") as status:
            results = _compile(topo, coll, sizes, auto_chunks, output, fmt, solver,
                               kw["fred_tables"], _showing_files(status, since),
                               kw["previous"], kw["runtime"])
    except TimeLimitReached as e:
        raise _more_time(e) from None
    infos = [r.as_dict() for r in results]
    if kw["as_json"]:
        emit_json(infos[0] if not sizes else {"topology": topo.name,
                                              "collective": coll.kind.value,
                                              "output": output, "algorithms": infos})
    else:
        for info in infos:
            table_console(output).print(_table(info))
    for info in infos:
        if info["fabric"] and info["fabric"]["warning"]:
            err_console.print(f"warning: {info['fabric']['warning']}", highlight=False)


def _showing_files(progress: Progress, since: float | None) -> Progress:
    """``progress``, and in a pipe each better file the compile keeps (its ratio to the
    bound and where it came from) also as a line of its own at once: the periodic lines
    show only the latest message."""
    if not plain_progress():
        return progress  # a terminal's status line shows every message as it comes
    from te_ccl.compiler import Kept

    start = time.monotonic() if since is None else since

    def show(message: str) -> None:
        progress(message)
        if isinstance(message, Kept):
            sys.stderr.write(f"teccl: [{time.monotonic() - start:.1f}s] {message}\n")
            sys.stderr.flush()

    return show


def _compile(topo: Topology, coll: Collective, sizes: tuple[int, int] | None,
             auto_chunks: bool, output: str, fmt: str, solver: dict,
             fred_tables: str | None, progress: Progress,
             previous: str | None = None, runtime: str = "msccl") -> list[CompileResult]:
    """The compile results (:func:`te_ccl.compile`): one per size range with ``sizes``,
    else the one algorithm, within ``runtime``'s limits."""
    import te_ccl

    result = te_ccl.compile(topo, coll, chunks="auto" if auto_chunks else None, output=output,
                            fmt=fmt, fred_tables=fred_tables, previous=previous,
                            runtime=runtime, sizes=sizes, progress=progress, **solver)
    return result if isinstance(result, list) else [result]


def _compile_jobs(topo: Topology, spec: str | None, kw: dict) -> None:
    """``--jobs``: the joint compile of :mod:`te_ccl.jobs`, one XML per job in -o."""
    from te_ccl.jobs import compile_jobs, load_jobs
    from te_ccl.jobs.summary import jobs_table

    flags = {"collective": "--collective", "size": "--size", "chunks": "--chunks",
             "ranks": "--ranks", "root": "--root", "inplace": "--inplace", "proto": "--proto",
             "sizes": "--sizes", "fred_tables": "--fred-tables", "previous": "--from"}
    given = [flag for key, flag in flags.items() if kw.get(key) is not None]
    given += ["--runtime"] if kw["runtime"] != "msccl" else []
    if spec is not None or given or kw["fmt"] not in (None, "xml"):
        what = "a spec file" if spec is not None else (given or ["--format"])[0]
        raise SpecError(f"the jobs file says what to compile; {what} does not go with it",
                        key="--jobs")
    if kw["output"] == "-":
        raise SpecError("with --jobs, -o is a directory", key="--output")
    jobs = load_jobs(topo, kw["jobs"])
    output = kw["output"] or path_component(f"{topo.name}-jobs")
    check_output_dir(output, key="--output")
    since = (click.get_current_context().obj or {}).get("started")  # as one algorithm's
    try:
        with until(kw["time_limit"], since), progress_status("compiling the jobs…") as progress:
            result = compile_jobs(jobs, output, objective=kw["objective"],
                                  backend=kw["backend"], time_limit_s=kw["time_limit"],
                                  threads=kw["threads"], seed=kw["seed"], epoch=kw["epoch"],
                                  max_horizon=kw["max_horizon"], progress=progress)
    except TimeLimitReached as e:
        raise _more_time(e) from None
    if kw["as_json"]:
        emit_json(result.as_dict())
    else:
        table_console(output).print(jobs_table(result.as_dict()))


def _output(output: str | None, fmt: str | None, topo: Topology, kind: str,
            library: bool) -> tuple[str, str]:
    """The output path and format: the suffix decides, else xml, or json on a fabric whose
    switches reduce (an explicit xml there is refused before solving). The default path
    is one file name in the working directory, whatever the topology's name."""
    from te_ccl.compiler import output_format
    from te_ccl.lower.msccl import check_expressible

    fmt = output_format(output, fmt, topo.reducing_switches)
    check_expressible(fmt, topo)
    if fmt == "mscclpp" and library:
        raise SpecError("--sizes writes MSCCL XML or schedule JSON; compile one size for an "
                        "MSCCL++ plan (its min/max message size cover every size)",
                        key="--format")
    if library:
        return (output or path_component(f"{topo.name}-{kind}-algorithms")), fmt
    suffix = "mscclpp.json" if fmt == "mscclpp" else fmt
    return (output or path_component(f"{topo.name}-{kind}.{suffix}")), fmt


def _maybe_time(t: float | None) -> str:
    return format_time(t) if t is not None else "not replayed (too many transfers)"


def _buffers(info: dict) -> str:
    """Output buffer plus relay scratch: the largest GPU's, and the peak scratch."""
    low = min(info["buffer_bytes"].values(), default=0)
    text = format_size(info["max_buffer_bytes"])
    if low != info["max_buffer_bytes"]:
        text = f"{format_size(low)}..{text}"
    return text + f" (scratch peak {format_size(info['peak_scratch_bytes'])})"


def _fabric(f: dict) -> str:
    """The FRED switch limits of a compile with --fred-tables, worst switch of each."""
    return (f"SRAM {format_size(f['sram_bytes_max'])} of {format_size(f['sram_limit_bytes'])}"
            f" ({f['sram_switch']}); schedule holds {format_size(f['buffer_bytes_max'])} of "
            f"{format_size(f['buffer_limit_bytes'])} buffer ({f['buffer_switch']}); tables "
            f"{f['phases']} phases, {format_time(f['tables_time_s'])}")


def _busbw(info: dict) -> str:
    """busbw, or why there is none: switches that reduce or multicast relay no GPU bytes."""
    if info["busbw_GBps"] is None and info["algbw_GBps"] is not None:
        return "n/a (in-switch)"
    return format_bandwidth((info["busbw_GBps"] or 0) * 1e9)


def _table(info: dict) -> Table:
    t = Table(title=f"{info['collective']} on {info['topology']} ({info['ngpus']} GPUs)",
              show_header=False)
    ratio = info["bound_ratio"]
    rows = [
        ("backend", info["backend"]),
        ("model", f"{info['variables']} variables, {info['constraints']} constraints"),
        ("solver time", format_time(info["solver_time_s"])),
        ("epochs", f"{info['epochs']} × {format_time(info['epoch_s'])}"),
        (f"finish time ({info['measured_by']})", format_time(info["finish_time_s"])),
        ("predicted (epoch model)", format_time(info["predicted_s"])),
        ("schedule replay", _maybe_time(info["schedule_replay_s"])),
        ("algbw / busbw", f"{format_bandwidth((info['algbw_GBps'] or 0) * 1e9)} / "
                          + _busbw(info)),
        ("lower bound", format_time(info["lower_bound_s"])),
        ("ratio to bound", f"{ratio:.3f}" if ratio else "n/a"),
        ("size range", f"{info['min_bytes']}..{info['max_bytes'] or '∞'} bytes"),
        ("buffer per GPU", _buffers(info)),
        ("optimal (epoch model)", "yes" if info["optimal"] else "not proven"),
        ("output", str(info["output"])),
    ]
    if info["fabric"]:
        rows.append(("FRED switches", _fabric(info["fabric"])))
    rows += [("note", n) for n in info["notes"]]
    for k, v in rows:
        t.add_row(k, v)
    return t


def _more_time(e: TimeLimitReached) -> TimeLimitReached:
    """``e``, saying how to give the compile more time unless it names the limit to pass."""
    return e if e.limit_named else TimeLimitReached(f"{e} (--time-limit SECONDS allows more)")
