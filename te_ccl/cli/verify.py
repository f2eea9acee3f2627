"""``teccl verify FILE``: check an MSCCL XML algorithm or an MSCCL++ execution plan (JSON,
told apart by its first character) of any author before deploying it.

Exit codes: 0 valid, 1 invalid (at least one error finding), 2 unreadable input (missing
file, not XML at all, nested too deep, too large outside the canonical layout) or a bad
option. The report is the command's data, so it goes to stdout like ruff's violations:
the verdict first, then one line per finding (the first few of each rule, then one line
with how many more), or with ``--json`` one JSON object ``{file, valid, collective,
ngpus, ..., errors, warnings, counts: {rule: n}, truncated: {rule: n left out},
findings: [{rule, severity, gpu, tb, step, line, message}]}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.text import Text

from te_ccl.cli.common import CliConsole
from te_ccl.errors import SpecError
from te_ccl.runtime_limits import MSCCL, RUNTIMES
from te_ccl.verify.msccl.findings import RULES, clip
from te_ccl.verify.msccl.text import MAX_VALUE
from te_ccl.verify.msccl.verify import Report, verify_msccl

__all__ = ["verify_cmd"]


@click.command("verify")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--root", type=click.IntRange(min=0), default=None,
              help="Root rank of broadcast/reduce/gather/scatter (inferred if omitted).")
@click.option("--max-steps", type=click.IntRange(min=1), default=MSCCL.max_steps, show_default=True,
              help="Steps per thread block the runtime was built for (MSCCL_MAX_NUM_STEPS).")
@click.option("--slots", type=click.IntRange(min=1), default=MSCCL.nccl_steps,
              show_default=True,
              help="Slots of a connection (NCCL_STEPS); a call takes "
                   f"{MSCCL.call_slots('Simple')} under Simple, 1 under LL/LL128.")
@click.option("--runtime", type=click.Choice(list(RUNTIMES)), default=MSCCL.name,
              show_default=True, help="Whose MSCCL XML parser limits apply: the MSCCL "
              "executor's, or RCCL's (64 thread blocks per GPU, 128 channels, its LL/LL128 "
              "buffers).")
@click.option("--upgrade", is_flag=True, help="Add the <algo> attributes msccl-tools' older "
              "format lacks (outofplace, minBytes, maxBytes), check the result, and write it "
              "to -o if valid.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), metavar="NEW",
              help="Where --upgrade writes the executor-format file.")
@click.pass_context
def verify_cmd(ctx: click.Context, file: Path, as_json: bool, root: int | None,
               max_steps: int, slots: int, runtime: str, upgrade: bool,
               output: Path | None) -> None:
    """Check an MSCCL XML algorithm: runtime parser rules, unchecked rules, and a
    symbolic run of every rank with the runtime's connection buffering for the file's
    proto (deadlock, races, uninitialized reads, final buffers)."""
    if upgrade != (output is not None):
        raise click.UsageError("--upgrade and -o/--output go together")
    from te_ccl.verify.mscclpp import is_plan_file

    if is_plan_file(file):
        if upgrade or root is not None or runtime != MSCCL.name:
            raise click.UsageError("--upgrade, --root and --runtime apply to MSCCL XML, "
                                   "not to an MSCCL++ plan")
        _verify_plan(ctx, file, as_json)
        return
    limits = RUNTIMES[runtime]
    if upgrade:
        report = _upgrade(file, output, root=root, max_steps=max_steps, slots=slots,
                          limits=limits)
    else:
        report = _hint_upgrade(verify_msccl(file, root=root, max_steps=max_steps,
                                            slots=slots, limits=limits))
    if as_json:
        click.echo(json.dumps(report_json(report)))
    else:
        _print(report)
    if not report.valid:
        ctx.exit(1)


def _verify_plan(ctx: click.Context, file: Path, as_json: bool) -> None:
    """An MSCCL++ plan: the verdict, then one line per error (docs/runtimes.md)."""
    from te_ccl.verify.mscclpp import verify_plan_file

    report = verify_plan_file(file)
    if as_json:
        click.echo(json.dumps({"file": str(file), **report.as_dict()}))
    else:
        console = CliConsole(highlight=False, soft_wrap=True)
        verdict = Text("valid", style="bold green") if report.valid else Text(
            f"invalid: {len(report.errors):,} error(s)", style="bold red")
        console.print(Text(f"{file}: MSCCL++ plan {clip(report.name)!r}, "
                           f"{clip(report.collective)}, {report.ranks} ranks, {report.blocks} "
                           f"thread blocks, {report.ops} ops run — ").append(verdict))
        for e in report.errors[:report.MAX_SHOWN]:
            console.print(Text("error   ", style="bold red").append(e))
        if len(report.errors) > report.MAX_SHOWN:
            console.print(Text(f"… and {len(report.errors) - report.MAX_SHOWN:,} more errors",
                               style="dim"))
        for note in report.notes:
            console.print(Text(f"note: {note}", style="dim"))
    if not report.valid:
        ctx.exit(1)


def _hint_upgrade(report: Report) -> Report:
    """Name the fix when the older format's missing attributes are the only errors."""
    from dataclasses import replace

    from te_ccl.verify.msccl.reader import LEGACY_RULES

    if report.errors and all(f.rule in LEGACY_RULES for f in report.errors):
        note = (f"msccl-tools' older format: `teccl verify {report.source} --upgrade -o NEW.xml` "
                "writes it in the executor's format")
        return replace(report, notes=(*report.notes, note))
    return report


def _upgrade(file: Path, output: Path, **checks) -> Report:
    """Verify ``file`` in the executor's format; write that format to ``output`` if valid."""
    from dataclasses import replace

    from te_ccl.outputs import check_output_file, write_atomic
    from te_ccl.verify.msccl.reader import parse_msccl, upgrade_legacy

    check_output_file(output, key="--output")
    parse_msccl(file)  # refuses binary, huge or unreadable input before holding its text
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"cannot read the file ({e.strerror})", file=str(file)) from None
    new, added = upgrade_legacy(text)
    report = verify_msccl(new, **checks)
    what = (f"added {', '.join(added)}" if added else "already in the executor's format")
    if report.valid:
        write_atomic(output, new)
        note = f"upgraded ({what}): wrote {output}"
    else:
        note = f"not upgraded ({what}); nothing written"
    return replace(report, source=str(file), notes=(*report.notes, note))


def report_json(report: Report) -> dict:
    """The ``--json`` object (also used by ``teccl compile`` if it wants to embed it):
    every rule's count in ``counts``, the first few findings of each rule in
    ``findings``, and per rule how many ``findings`` leaves out in ``truncated``."""
    a = report.algo
    data: dict = {"file": report.source, "valid": report.valid, "runtime": report.runtime,
                  "collective": clip(a.coll, MAX_VALUE) if a else None,
                  "ngpus": a.ngpus if a else None}
    if a is not None:
        data.update(name=clip(a.name, MAX_VALUE), proto=clip(a.proto, MAX_VALUE),
                    nchannels=a.nchannels, nchunksperloop=a.nchunksperloop,
                    inplace=bool(a.inplace), outofplace=bool(a.outofplace),
                    min_bytes=a.min_bytes, max_bytes=a.max_bytes,
                    threadblocks=a.nthreadblocks, steps=a.nsteps, channels_used=_channels(report))
    data.update(executed=report.executed, root=report.root, root_inferred=report.root_inferred,
                errors=report.error_count, warnings=report.warning_count,
                notes=list(report.notes), counts=report.counts, truncated=report.omitted(),
                findings=[f.as_dict() for f in report.findings])
    return data


def _channels(report: Report) -> int:
    return len({t.chan for g in report.algo.gpus for t in g.threadblocks})


def _print(report: Report) -> None:
    """The verdict, the findings kept, one line per rule with more, then the notes."""
    console = CliConsole(highlight=False, soft_wrap=True)
    console.print(_verdict(report))
    for f in report.findings:
        line = Text()
        line.append(f"{f.severity:7}", style=_STYLE[f.severity])
        line.append(f" {f.where():22}", style="cyan")
        line.append(f" line {f.line:<5}" if f.line else " " * 11, style="dim")
        line.append(f" {f.rule}: ", style="bold")
        line.append(f.message)
        console.print(line)
    for rule, n in report.omitted().items():
        severity = RULES[rule].severity
        line = Text(f"{severity:7}", style=_STYLE[severity])
        line.append(f" {'':22} {'':10} … and {n:,} more {rule}", style="dim")
        console.print(line)
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))


_STYLE = {"error": "bold red", "warning": "yellow"}


def _verdict(report: Report) -> Text:
    """``FILE: what it is — valid`` or ``… — invalid: N error(s)``."""
    a = report.algo
    what = "unreadable structure"
    if a is not None:
        mode = "/".join(m for m, on in (("in-place", a.inplace), ("out-of-place", a.outofplace))
                        if on) or "no mode"
        what = (f"{clip(a.coll)}, {a.ngpus} GPUs, {a.nthreadblocks} thread blocks, "
                f"{a.nsteps} steps, {_channels(report)} channel(s), {clip(a.proto)}, {mode}")
        if report.root is not None:
            what += f", root {report.root}" + (" (inferred)" if report.root_inferred else "")
    verdict = Text("valid", style="bold green") if report.valid else Text(
        f"invalid: {report.error_count:,} error(s)", style="bold red")
    return Text(f"{report.source}: {what} — ").append(verdict).append(
        f" ({report.runtime} limits)", style="dim")
