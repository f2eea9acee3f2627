"""A short compile's first file: where the first cheap candidate's file is far from the
bound, the other cheap candidates are built and the one predicted fastest is lowered too,
so a search that the limit ends early does not leave a ring over slow links as the file."""

from __future__ import annotations

from pathlib import Path

import pytest

import te_ccl.compiler.pipeline as pipeline
from te_ccl.backends.base import SolveParams
from te_ccl.compiler import CompileOptions, compile_collective
from te_ccl.spec.collective import load_collective
from te_ccl.spec.topology import load_topology


@pytest.fixture
def no_search(monkeypatch):
    """The search after the first file finds nothing (a limit spent on a slow candidate)."""
    monkeypatch.setattr(pipeline, "repair", lambda *args: None)


def _half(tmp_path: Path):
    """Half of each DGX-2 box in one AllGather: the ring crosses the boxes' links."""
    topo = load_topology("dgx2x2")
    coll = load_collective(topo, None, collective="allgather", size="64MB", ranks="0-7,16-23")
    out = tmp_path / "half.xml"
    return compile_collective(topo, coll, SolveParams(time_limit_s=600),
                              CompileOptions(output=str(out))), out


def test_a_first_file_far_from_the_bound_gives_way_to_the_fastest_predicted(
        tmp_path, no_search):
    result, out = _half(tmp_path)
    sources = [i.source for i in result.incumbents]
    assert sources[0].startswith("first file: template ring")
    assert result.incumbents[0].ratio > pipeline.FIRST_FILE_GAP
    assert sources[-1].startswith("first file: template hierarchical")
    assert result.incumbents[-1].ratio < pipeline.FIRST_FILE_GAP
    assert out.exists()


def test_a_first_file_near_the_bound_is_not_second_guessed(tmp_path, no_search, monkeypatch):
    monkeypatch.setattr(pipeline, "FIRST_FILE_GAP", 1e9)
    result, _ = _half(tmp_path)
    assert [i.source.split(",")[0] for i in result.incumbents] == ["first file: template ring"]
