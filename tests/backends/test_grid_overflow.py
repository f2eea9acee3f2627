"""Why a grid plan does not fit the runtime names the limit it passes."""

import numpy as np

from te_ccl.backends.scale.grid import overflow
from te_ccl.runtime_limits import MSCCL


def _why(blocks: int, waited: int) -> str:
    one = np.zeros(blocks, dtype=np.int64)  # every block on rank 0, one step each
    return overflow(2, MSCCL, one, one, np.ones(blocks, dtype=np.int64),
                    np.array([waited], dtype=np.int64))


def test_a_plan_within_the_limits_fits():
    assert _why(2, 1) == ""


def test_too_many_thread_blocks_are_named_as_such():
    assert "thread blocks, more than" in _why(MSCCL.max_threadblocks + 1, 0)


def test_a_wait_past_the_waitable_blocks_is_not_called_too_many_blocks():
    why = _why(2, MSCCL.waitable)
    assert f"waits for thread block {MSCCL.waitable}" in why
    assert "thread blocks, more than" not in why
