"""Every real MSCCL file verifies clean but one that hangs on large messages; the
legacy-format ones fail for minBytes."""

from __future__ import annotations

import pytest

from te_ccl.verify.msccl import read_msccl
from te_ccl.verify.msccl.reader import MscclFormatError
from te_ccl.verify.msccl.verify import verify_msccl

from .xmltools import MISSING, REFERENCE, reference_files

if not REFERENCE.is_dir():
    pytest.skip(MISSING, allow_module_level=True)
NAMES = sorted(p.name for p in REFERENCE.glob("*/*.xml"))


# hangs once a chunk exceeds 1 MiB (test_buffering.py): four single-chunk calls each way
DEADLOCKS_LARGE = "azure_allgather_recursive_doubling_8_1.xml"


@pytest.mark.parametrize("name", [n for n in NAMES
                                  if not n.startswith("legacy_") and n != DEADLOCKS_LARGE])
def test_reference_file_is_valid(name: str) -> None:
    path = next(p for p in reference_files() if p.name == name)
    report = verify_msccl(path)
    assert report.valid, [f.message for f in report.findings]
    assert report.executed
    assert report.findings == ()


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("legacy_")])
def test_legacy_file_is_rejected_for_min_bytes(name: str) -> None:
    path = next(p for p in reference_files() if p.name == name)
    report = verify_msccl(path)
    assert not report.valid
    first = report.errors[0]
    assert first.rule == "missing-algo-attribute" and "minBytes" in first.message
    with pytest.raises(MscclFormatError, match="minBytes"):
        read_msccl(path)


def test_reference_folder_is_complete() -> None:
    names = [p.name for p in reference_files()]
    assert len(names) >= 40 and sum(n.startswith("legacy_") for n in names) == 3


def test_read_msccl_gives_typed_algorithm() -> None:
    path = next(p for p in reference_files() if p.name == "azure_allgather_ring_8_1_1.xml")
    algo = read_msccl(path)
    assert (algo.coll, algo.ngpus, algo.nchunksperloop, algo.inplace) == ("allgather", 8, 8, 1)
    assert [g.id for g in algo.gpus] == list(range(8))
    tb = algo.gpus[0].threadblocks[0]
    assert (tb.send, tb.recv, tb.chan, len(tb.steps)) == (1, 7, 0, 8)
    assert [s.type for s in tb.steps] == ["s"] + ["rcs"] * 6 + ["r"]
    assert algo.min_bytes == 0 and algo.max_bytes == 0
