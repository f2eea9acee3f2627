"""Fixtures shared by the whole suite; under ``CI`` the property tests are derandomized
(the same examples every run: a red CI means a change broke something, not that
hypothesis happened to find an old bug — explore locally, where seeds are random)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from te_ccl.cli.main import main

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def teccl(capsys):
    """Run `teccl ARGS` in-process through main()'s error mapping: (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out, err = capsys.readouterr()
        return exc.value.code, out, err

    return run
