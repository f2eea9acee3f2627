"""``teccl verify`` through click's CliRunner and once as a real process (exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from te_ccl.cli.main import cli
from te_ccl.verify.msccl import MscclReadError

from .xmltools import REFERENCE, reference, reference_files

RING = "azure_allgather_ring_8_1_1.xml"


def _write(tmp_path: Path, text: str, name: str = "algo.xml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_valid_file_human_output() -> None:
    path = next(p for p in reference_files() if p.name == RING)
    result = CliRunner().invoke(cli, ["verify", str(path)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output and "allgather, 8 GPUs, 8 thread blocks, 64 steps" in result.output


def test_invalid_file_json(tmp_path: Path) -> None:
    text = reference(RING).replace('dstoff="7" cnt="1"', 'dstoff="6" cnt="1"', 1)
    result = CliRunner().invoke(cli, ["verify", "--json", str(_write(tmp_path, text))])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["valid"] is False and data["collective"] == "allgather" and data["ngpus"] == 8
    rules = {f["rule"] for f in data["findings"]}
    assert "wrong-result" in rules
    f = data["findings"][0]
    assert set(f) >= {"rule", "gpu", "tb", "step", "message"}


def test_human_output_names_place_and_rule(tmp_path: Path) -> None:
    text = reference(RING).replace('<step s="3" type="rcs"', '<step s="4" type="rcs"', 1)
    result = CliRunner().invoke(cli, ["verify", str(_write(tmp_path, text))])
    assert result.exit_code == 1
    line = next(ln for ln in result.output.splitlines() if "step-position" in ln)
    assert "gpu 0 tb 0 step 3" in line and "s=4 at position 3" in line
    assert "invalid: 1 error(s)" in result.output


def test_root_and_max_steps_options(tmp_path: Path) -> None:
    path = next(p for p in reference_files() if p.name == RING)
    result = CliRunner().invoke(cli, ["verify", "--json", "--max-steps", "4", str(path)])
    assert result.exit_code == 1
    assert "max-steps" in {f["rule"] for f in json.loads(result.output)["findings"]}
    result = CliRunner().invoke(cli, ["verify", "--root", "-1", str(path)])
    assert result.exit_code == 2  # click usage error


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["verify", str(tmp_path / "nope.xml")])
    assert isinstance(result.exception, MscclReadError) and result.exception.exit_code == 2


def test_exit_codes_as_a_process(tmp_path: Path) -> None:
    good = REFERENCE / "generated" / RING
    bad = _write(tmp_path, reference(RING).replace("\n    <tb", "\n\t<tb", 1))
    junk = _write(tmp_path, "not xml at all\n", "junk.xml")
    codes = []
    for path in (good, bad, junk):
        proc = subprocess.run([sys.executable, "-c", "from te_ccl.cli.main import main; main()",
                               "verify", str(path)], capture_output=True, text=True, timeout=120)
        codes.append(proc.returncode)
    assert codes == [0, 1, 2]
    assert "not an XML file" in proc.stderr


def test_a_deadlock_at_the_runtimes_buffering_exits_1_naming_the_cycle(tmp_path: Path) -> None:
    from .test_buffering import exchange

    path = _write(tmp_path, exchange(3))  # Simple: two sends a connection, three in flight
    result = CliRunner().invoke(cli, ["verify", str(path)])
    assert result.exit_code == 1, result.output
    assert "deadlock: r0/tb0/s2 waits to send to r1 on channel 0 (connection full" in result.output
    assert CliRunner().invoke(cli, ["verify", "--slots", "12", str(path)]).exit_code == 0
