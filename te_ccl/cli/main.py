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

# name -> "module:attribute"; imported only when the command runs, so startup stays fast.
COMMANDS: dict[str, str] = {
    "verify": "te_ccl.cli.verify:verify_cmd",
    "topo": "te_ccl.cli.topo:topo",
    "fred": "te_ccl.cli.fred:fred",
    "compile": "te_ccl.cli.compile:compile_cmd",
    "sweep": "te_ccl.cli.sweep:sweep_cmd",
    "simulate": "te_ccl.cli.simulate:simulate_cmd",
    "baseline": "te_ccl.cli.baseline:baseline_cmd",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="teccl")
@click.option("--debug", is_flag=True, envvar="TECCL_DEBUG", help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Compile collective-communication schedules (TE-CCL flow model on OR-Tools)."""
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; library errors become one line on stderr and their exit code."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rc = cli.main(args=argv, prog_name="teccl", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("teccl: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
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
