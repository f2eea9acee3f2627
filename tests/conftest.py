"""Fixtures shared by the whole suite; under ``CI`` the property tests are derandomized
(the same examples every run: a red CI means a change broke something, not that
hypothesis happened to find an old bug — explore locally, where seeds are random).

``--clock-rate N`` runs ``time.monotonic`` N times fast in every test, as a slow machine
under load looks to the compile's deadlines: a test that holds only on a fast machine
fails with it (off by default; ``pytest --clock-rate 33 tests/<dir>``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from hypothesis import settings

from te_ccl.cli.main import main

# no per-example deadline: how long an example takes depends on the machine and its load
settings.register_profile("default", deadline=None)
settings.register_profile("ci", settings.get_profile("default"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def positive(text: str) -> float:
    """A clock rate: above 0 (at 0 or below the clock stands or runs back, and no
    deadline would ever pass)."""
    rate = float(text)
    if not rate > 0:
        raise ValueError(text)
    return rate


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--clock-rate", type=positive, default=1.0, metavar="N",
                     help="run time.monotonic N (> 0) times fast in each test (a slow machine)")


@pytest.fixture(autouse=True)
def _clock_rate(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``time.monotonic`` at ``--clock-rate`` times its pace from the test's start (a
    test's own fake clock, patched later, takes over from it)."""
    rate = request.config.getoption("--clock-rate")
    if rate == 1.0:
        return
    real = time.monotonic
    start = real()
    monkeypatch.setattr(time, "monotonic", lambda: start + (real() - start) * rate)


@pytest.fixture(autouse=True)
def _off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Output as in a pipe, whatever the runner's environment says: rich takes a pipe for a
    terminal under ``FORCE_COLOR`` or ``TTY_COMPATIBLE=1``, which CI runners set for
    coloured logs, and the tests of plain output would see its live display instead."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


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


@pytest.fixture
def fresh():
    """A runner of Python ``code`` in a new interpreter, where nothing the test process
    imported is loaded yet: ``run(code) -> (stdout, the modules loaded by its end)``."""
    def run(code: str) -> tuple[str, list[str]]:
        code += "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        return out, json.loads(out.splitlines()[-1])

    return run
