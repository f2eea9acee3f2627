"""Fixtures shared by the whole suite."""

from __future__ import annotations

import pytest

from te_ccl.cli.main import main


@pytest.fixture
def teccl(capsys):
    """Run `teccl ARGS` in-process through main()'s error mapping: (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out, err = capsys.readouterr()
        return exc.value.code, out, err

    return run
