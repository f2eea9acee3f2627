"""`teccl compile mesh16x16 --time-limit 1` as a user runs it, in a process of its own
(the limit counts the interpreter's start): a file `teccl verify` passes, or exit 3 with
one line that says what the cheapest file would take, and nothing written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HANG_S = 600  # a guard against a hang, not a measure of speed


def _teccl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "te_ccl", *args], capture_output=True,
                          text=True, timeout=HANG_S, cwd=cwd)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
def test_one_second_on_256_gpus_writes_a_verified_file_or_says_why_not(tmp_path, kind):
    run = _teccl("compile", "mesh16x16", "-c", kind, "-s", "64MiB", "--time-limit", "1",
                 "-o", "out.xml", cwd=tmp_path)
    if run.returncode == 0:
        check = _teccl("verify", "out.xml", cwd=tmp_path)
        assert check.returncode == 0, check.stdout + check.stderr
        return
    assert run.returncode == 3, run.stderr
    line, = run.stderr.strip().splitlines()
    assert re.match(r"teccl: error: (time limit of 1 s reached while|the time limit of 1 s "
                    r"was used up before the search began)", line), line
    assert re.search(r"(needs|takes) about [0-9.e+]+ s .*here", line), line
    assert "--time-limit SECONDS allows more" in line
    assert not list(tmp_path.iterdir())
