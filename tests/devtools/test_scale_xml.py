"""`python -m devtools.scale_xml` reads a saved run before compiling anything: a bad file is one
line and exit 2, not a traceback after an hour of compiles."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devtools.scale_xml", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flag", ["--update", "--table"])
@pytest.mark.parametrize("content", [None, "not json", '{"instance": "x"}', "[1]",
                                     '[{"instance": "x"}]', '{"rows": [1]}'])
def test_a_bad_saved_run_is_one_line_and_exit_2(tmp_path, flag, content):
    saved = tmp_path / "rows.json"
    if content is not None:
        saved.write_text(content)
    proc = _run("--only", "no-such-instance", flag, str(saved))
    assert proc.returncode == 2 and proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert flag in last and str(saved) in last and "Traceback" not in proc.stderr


def test_a_saved_run_prints_as_a_table(tmp_path):
    saved = tmp_path / "rows.json"
    saved.write_text('{"header": {"cpus": 2, "commits": ["abc1234"]}, "rows": [{"instance": '
                     '"mesh8x8:allgather", "compile_s": 7.8, "commit": "abc1234", '
                     '"load": [0.5, 1.5]}]}\n')
    proc = _run("--table", str(saved))
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Run: commit abc1234, load not recorded on 2 cores")
    line = lines[4]
    assert line.startswith("| mesh8x8:allgather |") and "| abc1234 | 0.5–1.5 |" in line


def test_an_update_keeping_earlier_rows_credits_no_single_run_in_the_header(tmp_path):
    saved = tmp_path / "rows.json"
    saved.write_text('{"header": {"commit": "abc1234", "load": [0.5, 1.5], "command": "x", '
                     '"cpus": 2}, "rows": [{"instance": "mesh8x8:allgather", "compile_s": 7.8, '
                     '"commit": "abc1234", "load": [0.5, 1.5]}, {"instance": '
                     '"torus8x8:allgather", "compile_s": 6.1, "commit": "def5678", '
                     '"load": [2.0, 3.0]}]}\n')
    assert _run("--only", "no-such-instance", "--update", str(saved)).returncode == 0
    header = json.loads(saved.read_text())["header"]
    assert header["commits"] == ["abc1234", "def5678"]
    assert not {"commit", "load", "command"} & set(header)
    lines = _run("--table", str(saved)).stdout.splitlines()
    assert lines[0].startswith("Run: commit abc1234, def5678, load not recorded")
