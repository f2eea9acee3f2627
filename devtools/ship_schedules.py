"""``make schedules``: compile and ship algorithms for the shipped GPU topologies.

``python -m devtools.ship_schedules DIR`` compiles {allgather, reducescatter,
allreduce, alltoall} on every shipped GPU topology with at most :data:`MAX_GPUS` GPUs
(``--max-gpus``), and writes for each ``DIR/TOPOLOGY/KIND.xml`` (out-of-place),
``KIND.inplace.xml`` and ``KIND.json`` (the ``teccl compile --json`` summary), in the
format of the runtime the machine runs (:func:`output_for`): MSCCL++ execution plans with
NVLink SHARP (``KIND.plan.json``, ``KIND.inplace.plan.json``) where the NVSwitch has it,
MSCCL XML held to RCCL's limits on the AMD machines of :data:`RCCL_MACHINES`, MSCCL XML
otherwise. Every file is verified before it is written, and its times are the replay of
the out-of-place file. Only unrooted collectives ship: the executors select an algorithm
by collective and size, never by root. ``DIR/index.json`` and ``DIR/README.md`` list every
combination, with the reason when one was skipped (solver time limit, a runtime limit).

``--remeasure`` solves nothing: it verifies every shipped file again and replays it
(:func:`remeasure_all`), so the index always reports what the files do.

The whole run shares one time budget: each solve gets an equal share of what is left
(between ``min_limit_s`` and ``max_limit_s``), smallest topologies first. Each
combination runs in a child process watched for its resident memory and a hard deadline
(an address-space cap would stop OR-Tools starting its threads long before memory runs
short).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from queue import Empty

import click

from te_ccl.backends.base import SolveParams
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.errors import TecclError
from te_ccl.outputs import write_atomic
from te_ccl.runtime_limits import MSCCL, RCCL, RuntimeLimits
from te_ccl.spec.topology import load_topology, shipped_topologies
from te_ccl.topology.model import Topology
from te_ccl.units import parse_size

__all__ = ["KINDS", "MAX_GPUS", "RCCL_MACHINES", "Output", "output_for", "shippable_topologies",
           "isolated", "ship_one", "ship_all", "remeasure_one", "remeasure_all"]

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall")
MAX_GPUS = 16  # make schedules' machines: their files stay small enough to track; larger
#               ones run to megabytes a file and are compiled on demand (--max-gpus)
SIZE = "64MiB"
MEMORY_LIMIT_BYTES = 4 << 30  # resident set of one combination's child
BUDGET_SUBCHUNKS = (2, 1)  # sub-chunk caps tried under a size budget: each sub-chunk more
#                            adds the steps, and the bytes, of a whole algorithm to a file
POLL_S = 0.5
WAFER_PREFIXES = ("fred-", "wafer-")
README_BUDGET = "256KiB"  # make schedules' --max-file-size, as the README states it
RCCL_MACHINES = ("mi250", "mi300x")  # AMD machines: RCCL's embedded MSCCL executor loads them


@dataclass(frozen=True)
class Output:
    """What a machine's files are: ``fmt`` (``xml`` or ``mscclpp``), held to ``runtime``'s
    limits, named ``KIND{suffix}`` and ``KIND.inplace{suffix}``."""

    fmt: str
    runtime: RuntimeLimits
    suffix: str


def output_for(topology: Topology) -> Output:
    """MSCCL++ plans on NVLink SHARP machines (the only runtime that drives its in-switch
    sums), XML to RCCL's limits on :data:`RCCL_MACHINES`, else XML for MSCCL."""
    if any(topology.node(s).nvls for s in topology.switches):
        return Output("mscclpp", MSCCL, ".plan.json")
    return Output("xml", RCCL if topology.name in RCCL_MACHINES else MSCCL, ".xml")


def shippable_topologies(max_gpus: int = MAX_GPUS) -> list[Topology]:
    """Shipped GPU topologies of ≤ ``max_gpus`` GPUs, but not the wafer-scale NPU fabrics of
    docs/fred.md (``fred-*``, ``wafer-*``). Switches that reduce (NVLink SHARP) are no
    obstacle: for MSCCL XML the compile uses every switch to forward only."""
    names = [n for n in shipped_topologies() if not n.startswith(WAFER_PREFIXES)]
    topos = [load_topology(name) for name in names]
    return sorted((t for t in topos if t.ngpus <= max_gpus), key=lambda t: (t.ngpus, t.name))


def ship_one(topology: Topology, kind: str, out_dir: Path, limit_s: float,
             max_subchunks: int | None = None, max_file_bytes: int | None = None) -> dict:
    """Compile, verify and write one combination; returns its index entry. The scale
    backend cuts each chunk into at most ``max_subchunks`` sub-chunks (None: as many as
    pipeline best and the runtime holds).

    On a machine whose files are MSCCL++ plans (:func:`output_for`) the MSCCL XML is
    compiled too and the faster by the replay of its file ships (a plan only where NVLS
    gains; the shim of MSCCL++ hands what no plan serves to the NCCL it wraps, which may
    be the MSCCL executor); the entry's ``alternative`` says what the other took. A
    format with a file over ``max_file_bytes`` ships only if the other's do too.
    """
    out = output_for(topology)
    outputs = [out] if out.fmt == "xml" else [out, Output("xml", MSCCL, ".xml")]
    base = out_dir / topology.name
    base.mkdir(parents=True, exist_ok=True)
    def rank(made: tuple[dict, list[str]]) -> tuple[bool, float]:
        largest = max((out_dir / f).stat().st_size for f in made[1])
        return (max_file_bytes is not None and largest > max_file_bytes,
                made[0]["finish_time_s"])

    made = sorted((_compile_files(topology, kind, o, base, limit_s, max_subchunks)
                   for o in outputs), key=rank)
    (info, files), others = made[0], made[1:]
    for _, theirs in others:
        for f in theirs:
            (out_dir / f).unlink(missing_ok=True)
    if others:
        other = others[0][0]
        info["alternative"] = (f"{_files_for(other)}: {other['finish_time_s'] * 1e6:.1f} us "
                               f"({other['measured_by']})")
    info.update(time_limit_s=limit_s)
    write_atomic(base / f"{kind}.json", json.dumps(info, indent=1) + "\n")
    entry = {"topology": topology.name, "collective": kind, "ngpus": topology.ngpus,
             "status": "ok", "format": info["format"], "runtime": info["runtime"],
             **{k: info[k] for k in ("finish_time_s", "measured_by", "predicted_s",
                                     "schedule_replay_s", "algbw_GBps", "bound_ratio",
                                     "optimal", "solver_time_s")},
             "files": [*files, f"{topology.name}/{kind}.json"]}
    return entry | ({"alternative": info["alternative"]} if others else {})


def _compile_files(topology: Topology, kind: str, out: Output, base: Path, limit_s: float,
                   max_subchunks: int | None) -> tuple[dict, list[str]]:
    """Write the two files of one combination as ``out``; returns the compile summary
    (of the out-of-place file) and the files' names (relative to the output directory).

    In place first: its receives may wait for sends, so the runtime holds fewer of its
    sub-chunks (:func:`~te_ccl.compiler.render.render_fitting`). The same schedule is then
    lowered out of place, or, where that does not fit either, compiled on its own.
    """
    from te_ccl.compiler import CompileOptions, Timer, compile_collective, render_fitting, summary

    coll = Collective(CollectiveKind(kind), parse_size(SIZE), tuple(range(topology.ngpus)),
                      inplace=True)
    name, inplace_name = f"{kind}{out.suffix}", f"{kind}.inplace{out.suffix}"
    params = SolveParams(time_limit_s=limit_s, threads=1, max_subchunks=max_subchunks)
    options = CompileOptions(fmt=out.fmt, runtime=out.runtime)
    inplace = compile_collective(topology, coll, params,
                                 replace(options, output=str(base / inplace_name)))
    s = inplace.schedule
    outofplace = replace(s, collective=replace(s.collective, inplace=False))
    timer = Timer(options=options)
    outofplace, data = render_fitting(outofplace, options, params, timer=timer)
    write_atomic(base / name, data)
    result = replace(inplace, schedule=outofplace, output=str(base / name),
                     timing=timer.timing(outofplace))
    info = summary(result, topology)
    files = [f"{topology.name}/{name}", f"{topology.name}/{inplace_name}"]
    info.update(output=files[0], inplace_output=files[1], format=out.fmt,
                runtime=out.runtime.name)
    return info, files


def _child(topo: Topology, kind: str, out_dir: Path, limit_s: float,
           max_subchunks: int | None, max_file_bytes: int | None, queue) -> None:
    try:
        queue.put(ship_one(topo, kind, out_dir, limit_s, max_subchunks, max_file_bytes))
    except (TecclError, MemoryError) as e:
        queue.put(_skipped(topo, kind, f"{type(e).__name__}: {e}"))


def _skipped(topo: Topology, kind: str, reason: str) -> dict:
    return {"topology": topo.name, "collective": kind, "ngpus": topo.ngpus,
            "status": "skipped", "reason": reason}


def _skipped_by_name(entry: dict, reason: str) -> dict:
    return {"topology": entry["topology"], "collective": entry["collective"],
            "ngpus": entry["ngpus"], "status": "skipped", "reason": reason}


def resident_bytes(pid: int) -> int | None:
    """The resident set size of process ``pid`` (Linux ``/proc``), None where unavailable.

    >>> import os
    >>> resident_bytes(os.getpid()) is None or resident_bytes(os.getpid()) > 0
    True
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def isolated(topo: Topology, kind: str, out_dir: Path, limit_s: float, hard_s: float,
              memory_bytes: int = MEMORY_LIMIT_BYTES, max_subchunks: int | None = None,
              max_file_bytes: int | None = None) -> dict:
    """:func:`ship_one` in a child process, killed after ``hard_s`` seconds (a solver that
    overruns its own limit must not stall the whole run) or once its resident memory
    exceeds ``memory_bytes``."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(topo, kind, out_dir, limit_s, max_subchunks,
                                             max_file_bytes, queue))
    child.start()
    deadline = time.monotonic() + hard_s
    try:
        while time.monotonic() < deadline:
            try:
                return queue.get(timeout=POLL_S)
            except Empty:
                rss = resident_bytes(child.pid)
                if rss is not None and rss > memory_bytes:
                    return _skipped(topo, kind, f"out of memory: resident {rss / 2**30:.1f} GiB "
                                                f"> {memory_bytes / 2**30:.1f} GiB")
        return _skipped(topo, kind, f"no result within {hard_s:.0f} s (solver limit "
                                    f"{limit_s:.0f} s)")
    finally:
        child.kill()
        child.join()


def within_budget(entry: dict, out_dir: Path, max_file_bytes: int) -> dict:
    """``entry`` itself, or a skipped one (its files removed) if one of its files is larger
    than ``max_file_bytes``: the size budget that keeps schedules/ small enough to commit."""
    if entry["status"] != "ok":
        return entry
    sizes = {name: (out_dir / name).stat().st_size for name in entry["files"]}
    name, largest = max(sizes.items(), key=lambda kv: kv[1])
    if largest <= max_file_bytes:
        return entry
    return _withdrawn(entry, out_dir, f"over the size budget: {name} is "
                                      f"{largest / 2**20:.1f} MiB, the budget is "
                                      f"{max_file_bytes / 2**10:.0f} KiB per file")


def _withdrawn(entry: dict, out_dir: Path, reason: str) -> dict:
    """A skipped entry for ``entry``, whose files are removed."""
    for f in entry["files"]:
        (out_dir / f).unlink(missing_ok=True)
    return _skipped_by_name(entry, reason)


def ship_all(out_dir: Path, *, budget_s: float = 780.0, min_limit_s: float = 5.0,
             max_limit_s: float = 60.0, topologies: list[str] | None = None,
             kinds: tuple[str, ...] = KINDS, max_file_bytes: int | None = None,
             max_gpus: int = MAX_GPUS, log=lambda msg: None,
             ship: Callable[..., dict] = isolated) -> list[dict]:
    """Ship every combination within ``budget_s`` seconds; returns the index entries.

    With ``max_file_bytes``, a combination whose files exceed it is recorded as skipped
    (see :func:`within_budget`). ``ship`` ships one combination (:func:`isolated`'s
    arguments and entry)."""
    shippable = shippable_topologies(max_gpus)
    topos = shippable
    if topologies:
        topos = [t for t in topos if t.name in topologies]
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(t, k) for t in topos for k in kinds]
    start, entries = time.monotonic(), []
    for i, (topo, kind) in enumerate(jobs):
        share = (budget_s - (time.monotonic() - start)) / (len(jobs) - i)
        limit = max(min_limit_s, min(max_limit_s, share * 0.6))
        hard_s = max(share, limit + 30)
        if max_file_bytes is None:
            entry = ship(topo, kind, out_dir, limit, hard_s)
        else:  # few sub-chunks first, whole chunks (the smallest files) if still too large
            for cap in BUDGET_SUBCHUNKS:
                shipped = ship(topo, kind, out_dir, limit, hard_s, max_subchunks=cap,
                                    max_file_bytes=max_file_bytes)
                entry = within_budget(shipped, out_dir, max_file_bytes)
                if entry is shipped:  # within the budget, or not shipped at all
                    break
        kept = set(entry["files"]) if entry["status"] == "ok" else set()
        for suffix in (".xml", ".plan.json"):  # and the files of a format no longer shipped
            for stale in (f"{kind}{suffix}", f"{kind}.inplace{suffix}", f"{kind}.json"):
                if f"{topo.name}/{stale}" not in kept:
                    (out_dir / topo.name / stale).unlink(missing_ok=True)
        entries.append(entry)
        log(f"[{i + 1}/{len(jobs)}] {topo.name} {kind}: {entry['status']} "
            f"{entry.get('reason', '')}".rstrip())
    merged = _merge_index(out_dir / "index.json", entries, [t.name for t in shippable])
    write_atomic(out_dir / "index.json", json.dumps(merged, indent=1) + "\n")
    write_atomic(out_dir / "README.md", _readme(merged))
    return entries


def remeasure_one(entry: dict, out_dir: Path) -> dict:
    """``entry`` measured again from its files alone (no solve): both files go through
    their checker (MSCCL XML: :func:`~te_ccl.verify.msccl.verify_msccl` with the entry's
    runtime limits, the runtime's buffering included; a plan:
    :func:`~te_ccl.verify.mscclpp.verify.check_plan`) and the out-of-place one is replayed
    at its size, as ``teccl simulate`` does; the entry and its ``KIND.json`` take the
    replay's finish time, bandwidths and ratio to the bound. A file that is missing or
    that its checker rejects makes the entry skipped, its files removed."""
    from te_ccl.cli.simulate import sim_summary
    from te_ccl.compiler import forward_only
    from te_ccl.runtime_limits import RUNTIMES
    from te_ccl.simulate.msccl import read_provenance, simulate_msccl
    from te_ccl.simulate.plan import simulate_plan

    if entry["status"] != "ok":
        return entry
    kind = entry["collective"]
    name, inplace_name, json_name = entry["files"]
    plan = name.endswith(".plan.json")
    runtime = RUNTIMES[entry.get("runtime", "msccl")]
    loaded = {}
    for file, inplace in ((name, False), (inplace_name, True)):
        got = (_read_plan(out_dir / file, kind, inplace) if plan
               else _read_xml(out_dir / file, kind, inplace, runtime))
        if isinstance(got, str):
            return _withdrawn(entry, out_dir, f"removed: {file} {got}")
        loaded[file] = got
    info_path = out_dir / json_name
    if not info_path.is_file():
        return _withdrawn(entry, out_dir, f"removed: {json_name} is missing")
    info = json.loads(info_path.read_text())
    made = None if plan else read_provenance(out_dir / name)
    size = made[1] if made is not None else info["size_bytes"]
    topology = load_topology(entry["topology"])
    sim = (simulate_plan(loaded[name], topology, size, checked=True) if plan
           else simulate_msccl(loaded[name], topology, size))
    coll = Collective(CollectiveKind(kind), size, tuple(range(topology.ngpus)))
    measured = sim_summary(topology if plan else forward_only(topology), coll, sim)
    replay = {"finish_time_s": measured["finish_time_s"],
              "measured_by": "plan replay" if plan else "xml replay",
              "algbw_GBps": measured["algbw_GBps"], "bound_ratio": measured["bound_ratio"]}
    notes = [n for n in info.get("notes", []) if not n.startswith("timed by the ")]
    info.update(replay, busbw_GBps=measured["busbw_GBps"],
                lower_bound_s=measured["lower_bound_s"], notes=notes)
    write_atomic(info_path, json.dumps(info, indent=1) + "\n")
    return {**entry, **replay}


def _read_xml(path: Path, kind: str, inplace: bool, runtime: RuntimeLimits):
    """The algorithm of the MSCCL XML at ``path`` if ``runtime``'s rules accept it as a
    ``kind`` in the buffer mode asked, else why not."""
    from te_ccl.verify.msccl import MscclReadError, verify_msccl

    mode = "inplace" if inplace else "outofplace"
    try:
        report = verify_msccl(path, limits=runtime)
    except MscclReadError as e:
        return f"cannot be read ({e})"
    if not report.valid:
        first = report.errors[0]
        return f"fails the verifier: {first.where()}: {first.rule}: {first.message}"
    if report.algo.coll != kind or not getattr(report.algo, mode):
        return f"is not a {kind} with {mode}=1"
    return report.algo


def _read_plan(path: Path, kind: str, inplace: bool):
    """The MSCCL++ plan at ``path`` (its JSON) if the plan checker accepts it as a ``kind``
    in the buffer mode asked, else why not."""
    from te_ccl.verify.mscclpp.verify import check_plan

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return f"cannot be read ({e})"
    report = check_plan(data)
    if not report.valid:
        return f"fails the plan checker: {report.errors[0]}"
    if data.get("collective") != kind or data.get("inplace") is not inplace:
        return f"is not a {kind} with inplace {str(inplace).lower()}"
    return data


def remeasure_all(out_dir: Path, *, topologies: list[str] | None = None,
                  kinds: tuple[str, ...] = KINDS, log=lambda msg: None) -> list[dict]:
    """:func:`remeasure_one` for the index's entries (those of ``topologies`` and ``kinds``);
    rewrites the index and README. Returns the entries remeasured."""
    index_path = out_dir / "index.json"
    index = json.loads(index_path.read_text())
    done = []
    for i, entry in enumerate(index):
        if entry["status"] != "ok" or entry["collective"] not in kinds or (
                topologies and entry["topology"] not in topologies):
            continue
        index[i] = new = remeasure_one(entry, out_dir)
        done.append(new)
        if new["status"] == "ok":
            log(f"{new['topology']} {new['collective']}: {_ratio(entry.get('bound_ratio'))} "
                f"({entry.get('measured_by', 'epoch model')}) -> {_ratio(new['bound_ratio'])} "
                f"({new['measured_by']})")
        else:
            log(f"{new['topology']} {new['collective']}: {new['reason']}")
    write_atomic(index_path, json.dumps(index, indent=1) + "\n")
    write_atomic(out_dir / "README.md", _readme(index))
    return done


def _merge_index(path: Path, entries: list[dict], order: list[str]) -> list[dict]:
    """Entries of earlier runs for other shippable combinations stay (a run may cover a
    subset); entries of topologies no longer shipped go."""
    old = json.loads(path.read_text()) if path.is_file() else []
    rank = {name: i for i, name in enumerate(order)}
    by_key = {(e["topology"], e["collective"]): e for e in old + entries
              if e["topology"] in rank}
    return sorted(by_key.values(), key=lambda e: (rank[e["topology"]],
                                                  KINDS.index(e["collective"])))


def _readme(entries: list[dict]) -> str:
    lines = ["# Shipped algorithms", "",
             f"Made by `make schedules` (`python -m devtools.ship_schedules`): {SIZE} "
             "buffers, out-of-place `KIND.xml` and in-place `KIND.inplace.xml`; "
             "`KIND.json` is the compile summary. Each machine ships in the format of the "
             "runtime it runs: where the NVSwitch has NVLink SHARP, MSCCL++ execution plans "
             "that use it (`KIND.plan.json`, `KIND.inplace.plan.json`; docs/runtimes.md) "
             "where their replay beats the MSCCL XML's, else the XML (the `files` column "
             "names what the other took; the MSCCL++ NCCL shim hands what no plan serves to "
             "the NCCL library it wraps, which may be the MSCCL executor); on "
             f"the AMD machines ({', '.join(RCCL_MACHINES)}) MSCCL XML held to RCCL's limits "
             "(`teccl verify --runtime rccl`); elsewhere MSCCL XML. Only unrooted "
             "collectives ship: the executors select an algorithm by collective and size, "
             "never by root.", "",
             "Every file passes `teccl verify` (XML: the runtime's parser rules and a run of "
             "every rank with the connections' real buffering per protocol; a plan: its "
             "structure and a symbolic run of every rank). Every number below is the replay "
             "of the out-of-place file at its size, as `teccl simulate TOPOLOGY "
             "schedules/TOPOLOGY/FILE` reports it (thread blocks and connections run as "
             "the runtime runs them); `time / bound` is that time over the collective's lower "
             "bound on the topology (with NVLink SHARP for a plan). `python -m "
             "devtools.ship_schedules schedules --remeasure` verifies every listed file again "
             "and replays it, without solving, and rewrites this index; a file its checker "
             "rejects is removed and listed as skipped.", "",
             f"`make schedules` compiles every combination on the machines of up to {MAX_GPUS} "
             f"GPUs again under a size budget of {README_BUDGET} per file (every file here is "
             "one it writes; it is run by hand, not by the tests, since it solves for minutes); "
             "a combination whose lowering is larger is listed as skipped with its size, and "
             "its older files are removed. Larger machines are compiled on demand, into a "
             "directory of your own: `python -m devtools.ship_schedules DIR --max-gpus 64`, or "
             "`teccl sweep` for a library of size ranges (`--format mscclpp` for plans)."]
    lines += ["",
              "To let the MSCCL runtime (or RCCL) load one machine's algorithms, give it a "
              "directory of only their XML files: `mkdir -p algos && cp "
              "schedules/TOPOLOGY/*.xml algos/ && export MSCCL_ALGO_DIR=$PWD/algos` (the "
              "runtime picks by collective and buffer mode; `KIND.json` is teccl's summary, "
              "not an algorithm). Plans are loaded by the MSCCL++ executor or registered "
              "with its NCCL shim (docs/runtimes.md, Loading a plan).",
              "",
              "Size-ranged families for the multi-node machines (one algorithm per message-"
              "size range, both buffer modes) are in `families/`, listed in "
              "`families/index.csv` (`python -m devtools.ship_families`, the second half of "
              "`make schedules`). For one machine: `mkdir -p algos && cp "
              "schedules/families/aws-p5x2/*.xml algos/ && export "
              "MSCCL_ALGO_DIR=$PWD/algos`; the runtime then picks by collective, buffer mode "
              "and `minBytes ≤ size ≤ maxBytes`.",
              "",
              "| topology | GPUs | collective | status | files | finish time | measured by | "
              "algbw GB/s | time / bound | optimal |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        if e["status"] == "ok":
            lines.append(f"| {e['topology']} | {e['ngpus']} | {e['collective']} | ok | "
                         f"{_files_for(e)}{'; ' + e['alternative'] if 'alternative' in e else ''}"
                         f" | {e['finish_time_s'] * 1e6:.1f} us | "
                         f"{e.get('measured_by', 'epoch model')} | {e['algbw_GBps']:.1f} | "
                         f"{_ratio(e['bound_ratio'])} | {'yes' if e['optimal'] else 'no'} |")
        else:
            reason = e["reason"].replace("|", "/")[:120]
            lines.append(f"| {e['topology']} | {e['ngpus']} | {e['collective']} | "
                         f"skipped: {reason} | | | | | | |")
    return "\n".join(lines) + "\n"


def _files_for(entry: dict) -> str:
    """Whose executor loads the entry's files."""
    if entry.get("format") == "mscclpp":
        return "MSCCL++ plan"
    return "RCCL XML" if entry.get("runtime") == "rccl" else "MSCCL XML"


def _ratio(x: float | None) -> str:
    return f"{x:.3f}" if x else "-"


def _log(message: str) -> None:
    click.echo(message, err=True)


@click.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--budget", type=float, default=780.0, show_default=True, metavar="SECONDS",
              help="Time budget of the whole run.")
@click.option("--topology", "topologies", multiple=True, help="Only these topologies.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS), help="Only these.")
@click.option("--max-file-size", metavar="SIZE", help="Skip combinations with a file larger "
              "than this (e.g. 256KiB), so the directory stays small enough to commit.")
@click.option("--max-gpus", type=click.IntRange(2), default=MAX_GPUS, show_default=True,
              help="Only topologies of at most this many GPUs.")
@click.option("--remeasure", is_flag=True, help="Compile nothing: verify the files OUT_DIR's "
              "index lists and replay their XML again; a file the verifier rejects is removed.")
def main(out_dir: str, budget: float, topologies: tuple[str, ...], kinds: tuple[str, ...],
         max_file_size: str | None, max_gpus: int, remeasure: bool) -> None:
    """Compile and write the shipped algorithms into OUT_DIR."""
    if remeasure:
        if max_file_size is not None:
            raise click.UsageError("--max-file-size applies to compiling, not to --remeasure")
        if not (Path(out_dir) / "index.json").is_file():
            raise click.UsageError(f"{out_dir}/index.json: no index to remeasure")
        entries = remeasure_all(Path(out_dir), topologies=list(topologies) or None,
                                kinds=kinds or KINDS, log=_log)
        ok = sum(e["status"] == "ok" for e in entries)
        click.echo(f"{ok}/{len(entries)} remeasured in {out_dir}", err=True)
        return
    entries = ship_all(Path(out_dir), budget_s=budget, topologies=list(topologies) or None,
                       kinds=kinds or KINDS,
                       max_file_bytes=parse_size(max_file_size) if max_file_size else None,
                       max_gpus=max_gpus, log=_log)
    ok = sum(e["status"] == "ok" for e in entries)
    click.echo(f"{ok}/{len(entries)} shipped into {out_dir}", err=True)


if __name__ == "__main__":
    sys.exit(main())
