"""Where no channels hold the edges timed by the schedule's replay, the lowering reruns once
timed by the epochs and stops there: the rerun must know its edges are epoch-timed even
after the merge pass has replaced them (else it took itself for replay-timed and reran
itself until the recursion limit). The schedules are AlltoAll of 64 kB on ring8 at the
finer chunkings ``--chunks auto`` tries, merged by holding."""

from __future__ import annotations

import pytest

from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.verify.msccl.verify import verify_msccl


def _runs(lines: list[str]) -> int:
    """How many times the lowering ran: each run starts by collapsing the transfers to edges."""
    return sum("transfers to GPU-to-GPU edges" in line for line in lines)


def _ring8(baseline: str, chunks: int):
    coll = Collective(CollectiveKind.ALLTOALL, 64_000, tuple(range(8)), chunks_per_rank=chunks)
    return build_baseline(baseline, load_topology("ring8"), coll)


def test_an_epoch_timed_rerun_lowers_once_to_a_verified_file():
    """Sent directly in 20 chunks per rank: the replay-timed edges fit no 32 channels, the
    epoch-timed ones do."""
    lines: list[str] = []
    xml = lower_to_msccl(_ring8("direct", 20), merge="hold", progress=lines.append)
    assert _runs(lines) == 2
    report = verify_msccl(xml.decode())
    assert report.valid, [f"{f.rule}: {f.message}" for f in report.errors][:5]


def test_an_epoch_timed_rerun_that_does_not_fit_is_refused_not_rerun():
    """Far pairs first in 24 chunks per rank: neither timing fits 32 channels, so the
    epoch-timed rerun is the last (it ran until the recursion limit when it took its
    merged edges for replay-timed); the compile then keeps another candidate."""
    lines: list[str] = []
    with pytest.raises(RuntimeLimitError, match="channels"):
        lower_to_msccl(_ring8("far-first", 24), merge="hold", progress=lines.append)
    assert _runs(lines) == 2
