"""``teccl compile --runtime rccl``: the MI250 and MI300X files teccl writes for RCCL pass
``teccl verify --runtime rccl`` (64 thread blocks per GPU), at 1 KB and at 64 MB."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import te_ccl
from te_ccl.cli.main import cli, main
from te_ccl.errors import SpecError

KINDS = ("allgather", "allreduce", "alltoall")


def _compiled_and_verified(tmp_path: Path, topo: str, kind: str, *flags: str) -> None:
    out = tmp_path / f"{topo}-{kind}.xml"
    compiled = CliRunner().invoke(cli, ["compile", topo, "-c", kind, "--runtime", "rccl",
                                        "-o", str(out), *flags])
    assert compiled.exit_code == 0, compiled.output
    checked = CliRunner().invoke(cli, ["verify", str(out), "--runtime", "rccl"])
    assert checked.exit_code == 0 and "valid (rccl limits)" in checked.output, checked.output


@pytest.mark.parametrize("topo", ["mi250", "mi300x"])
@pytest.mark.parametrize("kind", KINDS)
def test_small_amd_files_for_rccl_pass_rccl_rules(tmp_path: Path, topo: str, kind: str) -> None:
    """Each compile stops on its own in about a second; a limit near that ends it with no
    file (exit 3) when the machine is busy."""
    _compiled_and_verified(tmp_path, topo, kind, "-s", "1KB", "--time-limit", "60")


@pytest.mark.slow
@pytest.mark.parametrize("topo", ["mi250", "mi300x"])
@pytest.mark.parametrize("kind", KINDS)
def test_large_amd_files_for_rccl_pass_rccl_rules(tmp_path: Path, topo: str, kind: str) -> None:
    """At 64 MB with --chunks auto the MSCCL executor's mi250 files had ~118 thread blocks
    per GPU; RCCL's are lowered within its 64."""
    _compiled_and_verified(tmp_path, topo, kind, "-s", "64MB", "--chunks", "auto",
                           "--time-limit", "10")


def test_runtime_is_for_xml_only(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["compile", "mi300x", "-c", "allgather", "-s", "1KB", "--runtime", "rccl",
              "-o", str(tmp_path / "s.json")])
    assert exited.value.code == 2
    assert "the rccl runtime loads MSCCL XML, not json" in capsys.readouterr().err
    with pytest.raises(SpecError, match="runtime"):
        te_ccl.compile("mi300x", "allgather", size="1KB", runtime="nccl")  # type: ignore[arg-type]
