"""RCCL's rule set: ``teccl verify --runtime rccl`` applies RCCL's parser limits (64
thread blocks per GPU, 128 channels), accepts RCCL's own shipped algorithms, and the
MI300X algorithms teccl writes pass them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from te_ccl.cli.main import cli
from te_ccl.runtime_limits import MSCCL, RCCL, RUNTIMES
from te_ccl.verify.msccl.verify import verify_msccl
from tests.verify.synthetic import ring_allgather

DATA = Path(__file__).parent / "data"


def _with_extra_tb(text: str, tb_id: int) -> str:
    """An empty thread block ``tb_id`` on every GPU (after its last thread block)."""
    return re.sub(r"(\s*</gpu>)", f'\n    <tb id="{tb_id}" send="-1" recv="-1" chan="0">'
                  r"\n    </tb>\1", text)


def test_limits_differ_where_rccl_differs() -> None:
    assert (RCCL.max_threadblocks, RCCL.max_channels) == (64, 128)
    assert (MSCCL.max_threadblocks, MSCCL.max_channels) == (1024, 32)
    same = ("max_steps", "max_count", "max_peers", "max_elements", "max_reduce_fusion",
            "nccl_steps", "chunk_steps", "slice_steps", "buffsize_simple")
    assert all(getattr(RCCL, k) == getattr(MSCCL, k) for k in same)
    assert set(RUNTIMES) == {"msccl", "rccl"}


def test_a_65th_thread_block_is_refused_by_rccl_only() -> None:
    text = _with_extra_tb("\n".join(ring_allgather(4, 8, 32)), 64)  # 64 tbs + one
    assert verify_msccl(text).valid
    report = verify_msccl(text, limits=RCCL)
    assert not report.valid and report.rules() == {"tb-id-range"}
    assert report.runtime == "rccl"


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.xml")))
def test_rccl_shipped_algorithms_pass_rccl_rules(name: str) -> None:
    result = CliRunner().invoke(cli, ["verify", str(DATA / name), "--runtime", "rccl",
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert '"runtime": "rccl"' in result.output and '"valid": true' in result.output


def test_runtime_is_for_msccl_xml_only() -> None:
    result = CliRunner().invoke(cli, ["verify", str(DATA / "alltoall-8n-0-9kb.xml"),
                                      "--runtime", "nccl"])
    assert result.exit_code == 2 and "msccl" in result.output and "rccl" in result.output


@pytest.mark.parametrize("topo, kind, size", [("mi300x", "allreduce", "64KB"),
                                              ("mi300x", "allgather", "64KB")])
def test_amd_algorithms_pass_rccl_rules(tmp_path: Path, topo: str, kind: str,
                                        size: str) -> None:
    out = tmp_path / f"{topo}-{kind}.xml"
    compiled = CliRunner().invoke(cli, ["compile", topo, "-c", kind, "-s", size,
                                        "-o", str(out), "--time-limit", "20"])
    assert compiled.exit_code == 0, compiled.output
    checked = CliRunner().invoke(cli, ["verify", str(out), "--runtime", "rccl"])
    assert checked.exit_code == 0, checked.output


def test_the_execution_packs_chunks_per_call_by_the_runtimes_buffers() -> None:
    """An LL128 file of up to 1 MiB in 8 chunks: the MSCCL executor's 128-byte LL128
    lines let a call carry 4 chunks, RCCL's smaller buffer 1; both still verify."""
    from te_ccl.verify.msccl.execute import _Machine
    from te_ccl.verify.msccl.reader import parse_msccl

    text = "\n".join(ring_allgather(4, 2, 2)).replace('proto="Simple"', 'proto="LL128"', 1)
    text = text.replace('maxBytes="0"', f'maxBytes="{1 << 20}"', 1)
    algo, _ = parse_msccl(text)
    assert (_Machine(algo, 8, MSCCL).per_call, _Machine(algo, 8, RCCL).per_call) == (4, 1)
    assert verify_msccl(text).valid and verify_msccl(text, limits=RCCL).valid


def test_a_40th_channel_is_refused_by_the_msccl_executor_only() -> None:
    """The reader takes any runtime's channel count; each rule set applies its own."""
    text = "\n".join(ring_allgather(4, 8, 32))
    text = re.sub(r'nchannels="\d+"', 'nchannels="40"', text, count=1)
    text = re.sub(r'chan="0"', 'chan="39"', text)
    assert verify_msccl(text, limits=RCCL).valid
    report = verify_msccl(text)
    assert not report.valid and "channel-range" in report.rules()
