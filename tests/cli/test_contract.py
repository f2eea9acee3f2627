"""The command line's contract with scripts: exit codes with and without --debug, a JSON
object on stdout also on failure, results on stdout and the rest on stderr, a reader
that closes the pipe, ring baselines on topologies with and without a ring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from te_ccl.cli import topo as topo_cli

ROOT = Path(__file__).resolve().parents[2]
COLLECTIVES = ["allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce"]


@pytest.fixture
def broken(monkeypatch):
    """``teccl topo list`` with a bug in it."""

    def boom():
        raise RuntimeError("boom")

    monkeypatch.setattr(topo_cli, "shipped_topologies", boom)


def _error_object(out: str, err: str, code: int) -> None:
    """One JSON object on stdout that carries the line on stderr and the exit code."""
    line = err.strip().splitlines()[-1]
    obj = json.loads(out)
    assert obj == {"error": obj["error"], "exit": code} and line.endswith(obj["error"])


def test_an_internal_error_is_one_line_and_exit_70(teccl, broken):
    code, out, err = teccl("topo", "list")
    assert code == 70 and out == ""
    assert err == "teccl: internal error: RuntimeError: boom (rerun with --debug)\n"


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_prints_the_traceback_and_keeps_exit_70(teccl, broken, monkeypatch, how):
    if how == "flag":
        code, _, err = teccl("--debug", "topo", "list")
    else:
        monkeypatch.setenv("TECCL_DEBUG", "1")
        code, _, err = teccl("topo", "list")
    assert code == 70
    assert err.startswith("Traceback (most recent call last):") and "in boom" in err
    assert err.splitlines()[-1] == "teccl: internal error: RuntimeError: boom"


@pytest.mark.parametrize("args", [
    ("compile", "ring8", "-c", "allgather", "-s", "lots"),   # bad input
    ("compile", "ring8", "-c", "allgather", "--bogus"),      # usage
    ("verify", "no-such-file.xml"),                         # unreadable input
])
def test_debug_keeps_the_exit_code_of_every_other_failure(teccl, args):
    code, _, err = teccl(*args)
    debug_code, _, debug_err = teccl("--debug", *args)
    assert code == debug_code == 2
    assert debug_err.splitlines()[-1] == err.strip()


def test_json_gets_an_error_object_for_an_internal_error(teccl, broken):
    code, out, err = teccl("topo", "list", "--json")
    assert code == 70
    _error_object(out, err, 70)


@pytest.mark.parametrize(("args", "expect"), [
    (("compile", "ring8", "-c", "allgather", "-s", "lots"), 2),
    (("compile", "ring8", "-c", "allgather", "-s", "1MB", "--bogus"), 2),
    (("topo", "show", "no-such-topology"), 2),
    (("compile", "ring8", "-c", "allgather", "-s", "8KB", "--max-horizon", "2"), 3),
])
def test_json_gets_an_error_object_on_failure(teccl, tmp_path, args, expect):
    code, out, err = teccl(*args, "-o", str(tmp_path / "x.xml"), "--json") \
        if args[0] == "compile" else teccl(*args, "--json")
    assert code == expect and err.count("\n") == 1
    _error_object(out, err, expect)


def test_json_gets_an_error_object_when_a_check_fails(teccl, tmp_path):
    xml = tmp_path / "ring.xml"
    assert teccl("baseline", "ring", "ring8", "-c", "allgather", "-s", "1MB",
                 "-o", str(xml))[0] == 0
    bad = tmp_path / "bad.xml"
    bad.write_text(xml.read_text().replace('type="r"', 'type="nop"', 1))
    code, out, err = teccl("simulate", "ring8", str(bad), "--json")
    assert code == 1
    _error_object(out, err, 1)
    # verify's result is the finding: its own object, valid false, exit 1
    code, out, err = teccl("verify", str(bad), "--json")
    assert code == 1 and json.loads(out)["valid"] is False and err == ""


def test_results_go_to_stdout_and_messages_to_stderr(teccl, tmp_path):
    xml = tmp_path / "r.xml"
    code, out, err = teccl("baseline", "ring", "ring8", "-c", "allgather", "-s", "1MB",
                           "-o", str(xml))
    assert code == 0 and "finish time" in out and err == f"wrote {xml}\n"
    code, out, err = teccl("simulate", str(xml))
    assert code == 0 and "finish time" in out and err == ""


@pytest.mark.parametrize("command", ["baseline", "compile"])
def test_a_file_on_stdout_sends_the_table_to_stderr(teccl, command):
    args = ("baseline", "ring") if command == "baseline" else ("compile",)
    code, out, err = teccl(*args, "ring8", "-c", "allgather", "-s", "1MB", "-o", "-")
    assert code == 0 and out.startswith("<algo ") and out.rstrip().endswith("</algo>")
    assert "finish time" in err


def test_a_reader_that_closes_the_pipe_ends_the_run_quietly():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "te_ccl", "topo", "show", "torus8x8",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141 and proc.stderr.read() == b""
    proc.stderr.close()


@pytest.mark.parametrize("kind", COLLECTIVES)
def test_ring_baseline_on_a_switchless_mesh_writes_a_file_verify_accepts(teccl, tmp_path,
                                                                         kind):
    out = tmp_path / "r.xml"
    code, _, err = teccl("baseline", "ring", "mesh4x4", "-c", kind, "-s", "1MB",
                         "-o", str(out))
    assert code == 0, err
    assert teccl("verify", str(out))[0] == 0


@pytest.mark.parametrize("kind", COLLECTIVES)
def test_ring_baseline_on_ndv2x2_writes_a_verified_file_or_says_why(teccl, tmp_path, kind):
    out = tmp_path / "r.xml"
    code, _, err = teccl("baseline", "ring", "ndv2x2", "-c", kind, "-s", "1MB",
                         "-o", str(out))
    if kind in ("reducescatter", "allreduce", "reduce"):  # GPU b0.g0 cuts the graph
        assert code == 2 and err.count("\n") == 1 and not out.exists()
        assert "no ring through the 16 GPUs of ndv2x2" in err and "passes through b0.g0" in err
        return
    assert code == 0, err
    assert teccl("verify", str(out))[0] == 0
