"""The runtime's limits are the lowering's: RCCL's 64 thread blocks per GPU are kept by
construction, and what cannot be kept is refused, never written."""

from __future__ import annotations

from dataclasses import replace

import pytest

from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl import build_program, lower_to_msccl
from te_ccl.runtime_limits import RCCL
from te_ccl.verify.msccl.verify import verify_msccl
from tests.lower.conftest import coll, direct, full


def _most_threadblocks(program) -> int:
    return max(len(g.threadblocks) for g in program.gpus)


def test_rccl_files_keep_to_64_thread_blocks_where_msccls_would_not() -> None:
    schedule = direct(full(8), coll("alltoall", 8, chunks=8))
    assert _most_threadblocks(build_program(schedule)) > RCCL.max_threadblocks
    assert _most_threadblocks(build_program(schedule, runtime=RCCL)) <= RCCL.max_threadblocks
    report = verify_msccl(lower_to_msccl(schedule, runtime=RCCL).decode(), limits=RCCL)
    assert report.valid and report.runtime == "rccl"


def test_a_runtime_too_small_for_the_schedule_is_refused() -> None:
    schedule = direct(full(8), coll("alltoall", 8, chunks=64))
    tight = replace(RCCL, max_threadblocks=16)
    with pytest.raises(RuntimeLimitError, match="16 thread blocks per GPU"):
        lower_to_msccl(schedule, runtime=tight)


def test_a_rank_with_more_chunks_than_steps_is_refused_before_the_channel_pass(
        monkeypatch) -> None:
    """Each chunk a rank receives is a step of its own: 2 ranks exchanging 10,500 chunks
    each cannot load, and the lowering says so before assigning a channel."""
    import te_ccl.lower.msccl.passes as passes

    def never(*args, **kwargs):
        raise AssertionError("the channel pass ran")

    monkeypatch.setattr(passes, "assign_edges", never)
    schedule = direct(full(2), coll("alltoall", 2, chunks=10_500))
    with pytest.raises(RuntimeLimitError, match="receives 10,500 and sends 10,500 chunks"):
        lower_to_msccl(schedule)
