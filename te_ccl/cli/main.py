"""Entry point of ``teccl``: the command group, lazy subcommand loading and error handling.

This is the only place that turns library errors into exit codes (README.md's contract:
0 success, 1 a check failed, 2 bad input or usage, 3 the solver gave up, 70 a bug, 130
interrupted, 141 stdout closed by its reader) and into what says so: one line on
stderr and, under ``--json``, one ``{"error", "exit"}`` object on stdout.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn

import click

from te_ccl import __version__
from te_ccl.errors import InputWarning, TecclError

# name -> ("module:attribute", short help): a command's module is imported only when it
# runs (or its own --help is asked for), so `teccl --help` loads no solver, graph or
# numeric library (tests/cli/test_startup.py counts what it imports).
COMMANDS: dict[str, tuple[str, str]] = {
    "baseline": ("te_ccl.cli.baseline:baseline_cmd",
                 "Build a baseline (ring, ring-bidir, tree, direct, packed, …)."),
    "compile": ("te_ccl.cli.compile:compile_cmd", "Compile a collective on TOPOLOGY."),
    "fred": ("te_ccl.cli.fred:fred", "FRED wafer-scale fabric: switch, routing, evaluation."),
    "simulate": ("te_ccl.cli.simulate:simulate_cmd",
                 "Replay a schedule or an MSCCL XML file with link contention."),
    "sweep": ("te_ccl.cli.sweep:sweep_cmd", "Compile every point of a GRID into a library."),
    "topo": ("te_ccl.cli.topo:topo", "List, show, import and calibrate topologies."),
    "verify": ("te_ccl.cli.verify:verify_cmd", "Check an MSCCL XML algorithm."),
}


class PipeClosed(Exception):
    """The reader of stdout went away (``teccl topo list | head -1``): kept from click,
    which would call it exit 1, a failed check."""


class LazyGroup(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as e:
            raise PipeClosed from e

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from :data:`COMMANDS`, without importing any command."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="teccl")
@click.option("--debug", is_flag=True, envvar="TECCL_DEBUG",
              help="Print the traceback of a failure (the exit code stays the same).")
@click.option("--quiet", "-q", is_flag=True, envvar="TECCL_QUIET",
              help="No progress output on stderr (results, warnings and errors still print).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, quiet: bool) -> None:
    """Compile collective-communication schedules (TE-CCL flow model on OR-Tools)."""
    from te_ccl.cli.common import set_quiet

    set_quiet(quiet)
    ctx.ensure_object(dict)["debug"] = debug


def usage_line(e: click.UsageError) -> str:
    """A usage error as one line: the problem and where help is."""
    command = e.ctx.command_path if e.ctx is not None else "teccl"
    return f"{e.format_message()} (see '{command} --help')"


@dataclass(frozen=True)
class Failure:
    """How a run ended badly: ``teccl: {kind}{message}`` on stderr, ``{"error": message,
    "exit": code}`` on stdout under ``--json``, and the exit code."""

    message: str
    code: int
    kind: str = "error: "
    traced: bool = True  # worth a traceback under --debug (not a usage error or Ctrl-C)

    @classmethod
    def of(cls, e: BaseException, debug: bool) -> Failure:
        if isinstance(e, click.exceptions.Abort):
            return cls("interrupted", 130, kind="", traced=False)
        if isinstance(e, click.UsageError):
            return cls(usage_line(e), e.exit_code, traced=False)
        if isinstance(e, click.ClickException):
            return cls(e.format_message(), e.exit_code)
        if isinstance(e, TecclError):
            return cls(str(e), e.exit_code)
        if isinstance(e, MemoryError):  # the input's size estimate missed: not a bug of its
            return cls(f"out of memory in {_stage(e)} (use fewer chunks, fewer ranks or a "
                       "smaller topology)", 3)
        hint = "" if debug else " (rerun with --debug)"
        return cls(f"{type(e).__name__}: {e}{hint}", 70, kind="internal error: ")

    def report(self, error: BaseException, *, debug: bool, as_json: bool) -> NoReturn:
        if debug and self.traced:
            traceback.print_exception(error, file=sys.stderr)
        sys.stderr.write(f"teccl: {self.kind}{self.message}\n")
        if as_json:
            sys.stdout.write(json.dumps({"error": self.message, "exit": self.code}) + "\n")
        sys.exit(self.code)


def _stage(e: BaseException) -> str:
    """The innermost teccl module ``e`` passed through: where the memory ran out."""
    module = "teccl"
    tb = e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        if name.startswith("te_ccl."):
            module = name
        tb = tb.tb_next
    return module


def wants_json(args: list[str]) -> bool:
    """``--json`` among the options (before a ``--`` that ends them)."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. A failure is one line on stderr (with ``--debug``, the traceback
    first), with ``--json`` also one object on stdout, and its exit code: the same with
    or without ``--debug``. Run as the program (``argv`` None), the process then ends
    at once (:func:`_leave`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    state: dict[str, float | bool] = {"started": _started(argv)}
    try:
        _run(args, state)
    except SystemExit as e:
        if argv is not None:
            raise
        _leave(e.code)


def _started(argv: list[str] | None) -> float:
    """When a command's time limit starts: the start of the process that is the command
    (``argv`` None), else now."""
    if argv is not None:
        return time.monotonic()
    from te_ccl.deadline import process_start

    return process_start()


def _leave(code: object) -> NoReturn:
    """End the process that is the command at once: a large compile's millions of
    objects are left to the system (freeing them one by one takes seconds)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed already
            pass
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


@contextmanager
def _input_warnings() -> Iterator[None]:
    """Print each :class:`~te_ccl.errors.InputWarning` the library issues as one
    ``warning:`` line on stderr, once a run however often its input is read; other
    warnings go where Python sends them."""
    shown: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("always", InputWarning)  # each run, not only a process's first
        other = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *args: object,
                 **kwargs: object) -> None:
            if not issubclass(category, InputWarning):
                other(message, category, *args, **kwargs)
            elif str(message) not in shown:
                shown.add(str(message))
                click.echo(f"warning: {message}", err=True)

        warnings.showwarning = show
        yield


def _run(args: list[str], state: dict[str, float | bool]) -> NoReturn:
    """:func:`main` but for how the process ends: by ``sys.exit`` with the exit code."""
    try:
        with _input_warnings():
            rc = cli.main(args=args, prog_name="teccl", standalone_mode=False, obj=state)
        sys.stdout.flush()
    except (PipeClosed, BrokenPipeError):  # quietly, as a shell pipeline's SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except click.exceptions.NoArgsIsHelpError as e:  # a bare `teccl topo`: its help
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - every failure ends here, as one line
        debug = state.get("debug", False)
        Failure.of(e, debug).report(e, debug=debug, as_json=wants_json(args))
    sys.exit(rc if isinstance(rc, int) else 0)
