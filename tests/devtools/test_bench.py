"""`python -m devtools.bench quick` end to end (small solves), in-process and as a subprocess."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.bench import main
from devtools.readme import END, START

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(in_process):
    """Run the bench command in-process: (code, stdout, stderr)."""
    return in_process(main)


@pytest.mark.slow
def test_bench_quick_writes_outputs_and_judges_targets(bench, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\n{END}\n")
    out = tmp_path / "b"
    code, stdout, _ = bench("quick", "--out", str(out), "--threads", "1", "--json",
                            "--readme", str(readme))
    info = json.loads(stdout)
    assert code == (0 if all(t["met"] for t in info["targets"]) else 1)
    assert (out / "results.csv").exists() and (out / "plots" / "ring8.png").exists()
    assert "#### Targets" in readme.read_text()
    names = [t["name"] for t in info["targets"]]
    assert "ring8: teccl >= every baseline at every size" in names
    assert not any("mesh32x32" in n for n in names)  # only the suite's own targets
    code, _, _ = bench("quick", "--out", str(out), "--budget", "0", "--no-fail", "--json")
    assert code == 0


def test_bench_unknown_suite_is_one_line_exit_2(bench):
    code, _, err = bench("nope")
    assert code == 2 and "unknown suite" in err and len(err.strip().splitlines()) == 1


def test_bench_runs_as_a_module_from_the_repository_root():
    proc = subprocess.run([sys.executable, "-m", "devtools.bench", "nope"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown suite" in proc.stderr


def test_bench_is_not_a_teccl_command(teccl):
    code, _, err = teccl("bench", "quick")
    assert code == 2 and "No such command" in err
