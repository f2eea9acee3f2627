"""A first file far from the bound: where the candidate its prediction puts first is
refused when lowered, the next by prediction is lowered in its place, so a prediction
that is not the file (a lowering over a runtime limit) does not leave the far first file
as the one written."""

from __future__ import annotations

import pytest

import te_ccl.compiler.pipeline as pipeline
from te_ccl.backends.base import SolveParams
from te_ccl.compiler import CompileOptions, compile_collective
from te_ccl.errors import RuntimeLimitError
from te_ccl.spec.collective import load_collective
from te_ccl.spec.topology import load_topology


@pytest.fixture
def refused(monkeypatch):
    """No search after the first file, and the hierarchical template's file refused as if
    over a runtime limit."""
    monkeypatch.setattr(pipeline, "repair", lambda *args: None)
    render = pipeline.render

    def refuse_hierarchical(schedule, *args, **kwargs):
        if schedule.info.backend == "baseline:hierarchical":
            raise RuntimeLimitError("too many thread blocks on one GPU")
        return render(schedule, *args, **kwargs)

    monkeypatch.setattr(pipeline, "render", refuse_hierarchical)


def test_a_refused_candidate_gives_way_to_the_next_by_prediction(tmp_path, refused):
    topo = load_topology("dgx2x2")
    coll = load_collective(topo, None, collective="allgather", size="64MB", ranks="0-7,16-23")
    out = tmp_path / "half.xml"
    result = compile_collective(topo, coll, SolveParams(time_limit_s=600),
                                CompileOptions(output=str(out)))
    first, last = result.incumbents[0], result.incumbents[-1]
    assert first.source.startswith("first file: template ring")
    assert first.ratio > pipeline.FIRST_FILE_GAP
    assert last.source.startswith("first file: template")
    assert "hierarchical" not in last.source and last.ratio < first.ratio
    assert any("template hierarchical" in n and "was not kept" in n
               for n in result.schedule.info.notes)
