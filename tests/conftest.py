"""Fixtures shared by the whole suite; under ``CI`` the property tests are derandomized
(the same examples every run: a red CI means a change broke something, not that
hypothesis happened to find an old bug — explore locally, where seeds are random)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from te_ccl.cli.main import main

# no per-example deadline: how long an example takes depends on the machine and its load
settings.register_profile("default", deadline=None)
settings.register_profile("ci", settings.get_profile("default"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture
def in_process(capsys, monkeypatch):
    """A runner of a command's ``main(argv)`` in-process, through its error mapping:
    ``run(*args) -> (exit code, stdout, stderr)``; output as in a pipe, whatever
    ``COLUMNS`` the test runner's process has."""
    monkeypatch.delenv("COLUMNS", raising=False)

    def runner(entry):
        def run(*args: str) -> tuple[int, str, str]:
            with pytest.raises(SystemExit) as exc:
                entry(list(args))
            out, err = capsys.readouterr()
            return exc.value.code, out, err

        return run

    return runner


@pytest.fixture
def teccl(in_process):
    """Run `teccl ARGS` in-process: (exit code, stdout, stderr)."""
    return in_process(main)
