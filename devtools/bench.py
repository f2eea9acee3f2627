"""``python -m devtools.bench [SUITE]``: teccl and the baselines on a suite, against bounds and targets.

Writes ``OUT/results.csv``, ``OUT/results.md`` (its first line the run's commit, load and
command: :mod:`devtools.provenance`) and ``OUT/plots/*.png`` (default ``bench/``),
prints the targets (and with ``-v`` every result) as rich tables on stderr, and exits 1
when a target is short, unless ``--no-fail``. Bad input (an unknown suite, an unreadable
``--readme``) is one line on stderr and exit 2, as in ``teccl``.
"""

from __future__ import annotations

import sys
from dataclasses import asdict

import click

from devtools import provenance
from devtools.readme import fill_readme
from devtools.render import results_table, targets_table, write_outputs
from devtools.runner import run_suite
from devtools.suites import only, suite
from devtools.targets import evaluate_targets
from te_ccl.cli.common import emit_json, err_console
from te_ccl.errors import TecclError
from te_ccl.units import parse_size

__all__ = ["bench_cmd", "main"]

PROG = "python -m devtools.bench"


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("suite_name", metavar="[SUITE]", default="default")
@click.option("--out", "out_dir", default="bench", show_default=True, metavar="DIR",
              help="Where results.csv, results.md and plots/ go.")
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True,
              help="Solver threads.")
@click.option("--budget", type=float, metavar="SECONDS",
              help="Stop starting new cases after this long (default: the suite's).")
@click.option("--readme", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also refresh FILE's section between <!-- bench:start/end --> markers.")
@click.option("--topology", "topologies", multiple=True, metavar="NAME",
              help="Run only the suite's rows on these topologies (repeatable).")
@click.option("--size", "sizes", multiple=True, metavar="BYTES",
              help="Run only the suite's rows of these sizes (repeatable; 1MB = 10^6 bytes).")
@click.option("--collective", "kinds", multiple=True, metavar="KIND",
              help="Run only the suite's rows of these collectives (repeatable).")
@click.option("--no-fail", is_flag=True, help="Exit 0 even if a target is short.")
@click.option("-v", "--verbose", is_flag=True, help="Print every result row too.")
@click.option("--json", "as_json", is_flag=True, help="Print the targets as JSON on stdout.")
@click.pass_context
def bench_cmd(ctx: click.Context, suite_name: str, out_dir: str, threads: int,
              budget: float | None, readme: str | None, topologies: tuple[str, ...],
              sizes: tuple[str, ...], kinds: tuple[str, ...], no_fail: bool, verbose: bool, as_json: bool) -> None:
    """Run benchmark SUITE (default, quick, defaults, defaults-first) and judge the targets."""
    chosen = suite(suite_name)
    if topologies or sizes or kinds:
        chosen = only(chosen, topologies, tuple(parse_size(x) for x in sizes), kinds)
    live = err_console.is_terminal and not as_json
    with err_console.status(f"bench {chosen.name}…") as status:
        def progress(msg: str) -> None:  # a status line on a terminal, a log line per case in CI
            if live:
                status.update(msg)
            elif not as_json and msg.startswith("["):
                err_console.print(msg, highlight=False)

        header = provenance.start()
        result = run_suite(chosen, threads=threads, progress=progress, budget_s=budget)
    paths = write_outputs(result, out_dir, provenance.finish(header))
    if readme:
        fill_readme(readme, paths["markdown"])
    targets = evaluate_targets(result.rows, result.planned or None)
    if as_json:
        emit_json({"suite": chosen.name, "elapsed_s": result.elapsed_s,
                   "outputs": {k: str(v) for k, v in paths.items()},
                   "skipped": len(result.skipped), "targets": [asdict(t) for t in targets]})
    else:
        if verbose:
            err_console.print(results_table(result.rows))
        err_console.print(targets_table(targets))
        err_console.print(f"{sum(t.met for t in targets)}/{len(targets)} targets met in "
                          f"{result.elapsed_s:.0f} s; wrote {paths['markdown']}, "
                          f"{paths['csv']}, {paths['plots']}/")
    if not no_fail and not all(t.met for t in targets):
        ctx.exit(1)


def main(argv: list[str] | None = None) -> None:
    """Run the command; a library error becomes one line on stderr and its exit code."""
    try:
        rc = bench_cmd.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except TecclError as e:
        click.echo(f"{PROG}: error: {e}", err=True)
        sys.exit(e.exit_code)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
