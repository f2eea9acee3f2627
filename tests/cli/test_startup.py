"""`teccl --help` starts without the solver: the command list comes from a table, and a
command's module loads only when that command runs."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from te_ccl.cli.main import COMMANDS, cli

HEAVY = ("ortools", "networkx", "numpy", "matplotlib", "te_ccl.backends", "te_ccl.model",
         "te_ccl.lower", "te_ccl.verify", "te_ccl.simulate", "te_ccl.topology")


def _modules_after(args: list[str]) -> list[str]:
    code = ("import json, sys\nfrom te_ccl.cli.main import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_help_imports_no_solver_graph_or_numeric_module():
    loaded = _modules_after(["--help"])
    assert not [m for m in loaded if m.startswith(HEAVY)]
    assert [m for m in loaded if m.startswith("te_ccl")] == [
        "te_ccl", "te_ccl.cli", "te_ccl.cli.main", "te_ccl.errors"]


def test_a_command_loads_its_module_only_when_asked():
    loaded = _modules_after(["verify", "--help"])
    assert "te_ccl.cli.verify" in loaded and "te_ccl.cli.compile" not in loaded


def test_every_listed_command_exists_under_its_name():
    ctx = click.Context(cli)
    for name, (_, short) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
        assert short.endswith(".") and len(short) <= 70
