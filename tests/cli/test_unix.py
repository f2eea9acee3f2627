"""teccl as a Unix tool: one-line errors, progress off a terminal, --quiet, plain tables
in pipes, outputs that are directories or unwritable, interrupted writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from te_ccl.cli import common

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "te_ccl", *args], capture_output=True,
                          text=True, env=full, timeout=120)


@pytest.mark.parametrize("args", [
    ("compile", "--bogus"),
    ("compile", "dgx1", "-c", "allgather", "-s", "1MB", "--threads", "x"),
    ("frobnicate",),
    ("verify",),
])
def test_usage_errors_are_one_line_and_exit_2(teccl, args):
    code, out, err = teccl(*args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("teccl: error: ") and "--help" in err


def test_plain_progress_lines_when_stderr_is_not_a_terminal(teccl, monkeypatch, tmp_path):
    monkeypatch.setattr(common, "PLAIN_EVERY_S", 0.01)
    code, _, err = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB",
                         "-o", str(tmp_path / "a.xml"))
    assert code == 0
    lines = [x for x in err.splitlines() if x.startswith("teccl: [")]
    assert lines and all("s] " in x for x in lines)


def test_quiet_silences_progress_but_not_results(teccl, monkeypatch, tmp_path):
    monkeypatch.setattr(common, "PLAIN_EVERY_S", 0.01)
    try:
        code, out, err = teccl("--quiet", "compile", "ring8", "-c", "allgather", "-s", "1MB",
                               "-o", str(tmp_path / "a.xml"), "--json")
    finally:
        common.set_quiet(False)
    assert code == 0 and '"finish_time_s"' in out
    assert "teccl: [" not in err


BOX = set("─│┃━┏┓┗┛┡┩└┘┌┐├┤┼╇")


def test_tables_in_a_pipe_are_plain_lines_of_tab_separated_cells():
    proc = _run("fred", "evaluate", "-w", "resnet152")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "…" not in proc.stdout and not BOX & set(proc.stdout)
    header = next(x for x in lines if x.startswith("fabric\t"))
    rows = [x for x in lines if x.startswith("fred-") and "\t" in x]
    assert len(rows) == 4 and {x.count("\t") for x in rows} == {header.count("\t")} == {12}
    assert lines[0].startswith("# ") and max(len(x) for x in lines) > 80  # nothing cut


def test_tables_keep_within_columns_when_it_is_set():
    proc = _run("topo", "list", env={"COLUMNS": "70"})
    assert proc.returncode == 0, proc.stderr
    assert BOX & set(proc.stdout) and max(len(x) for x in proc.stdout.splitlines()) <= 70


def test_output_naming_a_directory_is_refused_before_solving(teccl, tmp_path):
    code, out, err = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB",
                           "-o", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "is a directory" in err


@pytest.mark.parametrize("args", [
    ("fred", "evaluate", "-w", "resnet152", "--plot", "{blocked}/p.png"),
    ("baseline", "ring", "ring8", "-c", "allgather", "-s", "1MB", "-o", "{tmp}/r.xml",
     "--timeline", "{blocked}/t.png"),
    ("baseline", "ring", "ring8", "-c", "allgather", "-s", "1MB", "-o", "{tmp}/r.xml",
     "--timeline", "{tmp}/t.gif"),
])
def test_unwritable_plots_exit_2_in_one_line(teccl, tmp_path, args):
    blocked = tmp_path / "file"
    blocked.write_text("a file, not a directory")
    code, _, err = teccl(*(a.format(blocked=blocked, tmp=tmp_path) for a in args))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_sigterm_during_the_final_write_leaves_no_temporary_file(tmp_path):
    """The child sends itself SIGTERM while the temporary file exists."""
    target = tmp_path / "out" / "x.xml"
    target.parent.mkdir()
    script = (
        "import os, signal\n"
        "import te_ccl.outputs as o\n"
        "real = os.chmod\n"
        "def chmod(*a):\n"
        "    real(*a)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "o.os.chmod = chmod\n"
        f"o.write_atomic({str(target)!r}, 'data')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
    assert proc.returncode == 128 + 15
    assert list(target.parent.iterdir()) == []


def test_compile_reports_buffers_per_gpu_and_peak_scratch(teccl, tmp_path):
    import json

    code, out, _ = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB",
                         "-o", str(tmp_path / "a.xml"), "--json")
    info = json.loads(out)
    assert code == 0 and len(info["buffer_bytes"]) == 8
    assert set(info["buffer_bytes"].values()) == {info["size_bytes"]}   # AllGather: the output
    assert info["max_buffer_bytes"] == info["size_bytes"] and info["peak_scratch_bytes"] == 0
    code, table, _ = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB",
                           "-o", str(tmp_path / "b.xml"))
    assert "buffer per GPU" in table and "scratch peak 0B" in table


def test_a_rooted_collective_without_root_compiles_for_rank_0(teccl, tmp_path):
    out = tmp_path / "b.xml"
    code, _, _ = teccl("compile", "ring8", "-c", "broadcast", "-s", "1MB", "-o", str(out))
    assert code == 0
    code, stdout, _ = teccl("verify", str(out), "--root", "0")
    assert code == 0


def test_a_pipe_gets_each_better_file_kept_as_a_line_and_stdout_only_results(teccl, tmp_path):
    code, out, err = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB",
                           "-o", str(tmp_path / "a.xml"), "--json")
    assert code == 0 and out.lstrip().startswith("{") and "file kept" not in out
    kept = [x for x in err.splitlines() if x.startswith("teccl: [") and "file kept: " in x]
    assert kept and all("× the bound, " in x and ("first file: " in x or "search: " in x)
                        for x in kept)
    assert len(kept) == len(json.loads(out)["incumbents"])
