"""An ``--epoch`` the flow model cannot use is refused before the compile starts: exit 2,
one line naming the option and what it expects, nothing written. The search is replaced
by a failure, so the refusal cannot depend on how far the compile gets in its time."""

from __future__ import annotations

import pytest

import te_ccl.compiler.pipeline as pipeline
from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.compiler.options import check_epoch
from te_ccl.errors import SpecError
from te_ccl.topology import generators as gen


@pytest.fixture
def no_search(monkeypatch):
    """A compile that gets past its input checks (to the bound, or a library's first
    range) fails the test."""
    def started(*args, **kwargs):
        raise AssertionError("the compile started")

    monkeypatch.setattr(pipeline, "lower_bound", started)
    monkeypatch.setattr(pipeline, "compile_size_ranges", started)


@pytest.mark.parametrize(("epoch", "expected"), [
    ("1ps", "at most 10000 fit a model"),
    ("0s", "expected a positive epoch duration"),
    ("1e300s", "at most 1e+06 s")], ids=["tiny", "zero", "huge"])
@pytest.mark.parametrize("sizes", [False, True], ids=["one", "library"])
def test_an_unusable_epoch_is_refused_before_the_search(teccl, tmp_path, no_search, epoch,
                                                        expected, sizes):
    out = tmp_path / ("lib" if sizes else "ag.xml")
    size = ["--sizes", "1KB..1MB"] if sizes else ["-s", "1MB"]
    code, _, err = teccl("compile", "dgx1", "-c", "allgather", *size, "--epoch", epoch,
                         "-o", str(out))
    assert code == 2, err
    assert err.startswith("teccl: error: epoch: ") and expected in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_scale_backend_reads_no_epoch():
    coll = Collective(K.ALLGATHER, 1_000_000, tuple(range(4)))
    topo = gen.ring(4, 50e9, 1e-6)
    check_epoch(topo, coll, SolveParams(backend="scale", epoch=1e-12))
    with pytest.raises(SpecError, match="too short"):
        check_epoch(topo, coll, SolveParams(epoch=1e-12))
    check_epoch(topo, coll, SolveParams(epoch=1e-6))
