"""Entry point of ``teccl``: the command group, lazy subcommand loading and error handling.

This is the only place that turns library errors into exit codes (PRODUCT.md's contract):
0 success, 1 a check failed, 2 bad input or usage, 3 the solver gave up, 70 a bug.
"""

from __future__ import annotations

import importlib
import sys

import click

from te_ccl import __version__
from te_ccl.errors import TecclError

# name -> ("module:attribute", short help): a command's module is imported only when it
# runs (or its own --help is asked for), so `teccl --help` loads no solver, graph or
# numeric library (tests/cli/test_startup.py counts what it imports).
COMMANDS: dict[str, tuple[str, str]] = {
    "baseline": ("te_ccl.cli.baseline:baseline_cmd",
                 "Build a baseline (ring, ring-bidir, tree, direct, hierarchical)."),
    "compile": ("te_ccl.cli.compile:compile_cmd", "Compile a collective on TOPOLOGY."),
    "fred": ("te_ccl.cli.fred:fred", "FRED wafer-scale fabric: switch, routing, evaluation."),
    "simulate": ("te_ccl.cli.simulate:simulate_cmd",
                 "Replay a schedule or an MSCCL XML file with link contention."),
    "sweep": ("te_ccl.cli.sweep:sweep_cmd", "Compile every point of a GRID into a library."),
    "topo": ("te_ccl.cli.topo:topo", "List, show, import and calibrate topologies."),
    "verify": ("te_ccl.cli.verify:verify_cmd", "Check an MSCCL XML algorithm."),
}


class LazyGroup(click.Group):
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
@click.option("--debug", is_flag=True, envvar="TECCL_DEBUG", help="Show tracebacks of internal errors.")
@click.option("--quiet", "-q", is_flag=True, envvar="TECCL_QUIET",
              help="No progress output on stderr (results, warnings and errors still print).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, quiet: bool) -> None:
    """Compile collective-communication schedules (TE-CCL flow model on OR-Tools)."""
    from te_ccl.cli.common import set_quiet

    set_quiet(quiet)
    ctx.obj = {"debug": debug}


def usage_line(e: click.UsageError) -> str:
    """A usage error as one line: the problem and where help is."""
    command = e.ctx.command_path if e.ctx is not None else "teccl"
    return f"teccl: error: {e.format_message()} (see '{command} --help')"


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; library errors become one line on stderr and their exit code."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rc = cli.main(args=argv, prog_name="teccl", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("teccl: interrupted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as e:  # a bare `teccl topo`: its help
        e.show()
        sys.exit(e.exit_code)
    except click.UsageError as e:
        click.echo(usage_line(e), err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        click.echo(f"teccl: error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except TecclError as e:
        click.echo(f"teccl: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - last resort: one line, exit 70
        if debug:
            raise
        click.echo(f"teccl: internal error: {type(e).__name__}: {e} (rerun with --debug)", err=True)
        sys.exit(70)
    sys.exit(rc if isinstance(rc, int) else 0)
