"""AlltoAll of 64 MB on the 16-GPU mesh and torus: the scale backend's written file, replayed
as the runtime runs it, within 1% of the valid lower bound (the bench's goal) and never
below it."""

from __future__ import annotations

import pytest

import te_ccl


@pytest.mark.parametrize("topology", ["mesh4x4", "torus4x4"])
def test_the_file_replays_within_one_percent_of_the_bound(topology, tmp_path) -> None:
    result = te_ccl.compile(topology, "alltoall", size="64MB", backend="scale",
                            output=tmp_path / "a.xml", time_limit_s=600)  # ends in seconds
    assert result.measured_by == "xml replay"
    assert 1.0 - 1e-9 <= result.bound_ratio <= 1.01  # torus: at the bound, up to rounding
