"""The points of the executor benchmark (``python -m devtools.sweep_bench``)."""

from __future__ import annotations

import pytest

from devtools.sweep_bench import QUICK_POINTS, bench_points


def test_bench_points_are_distinct_and_bounded():
    pts = bench_points(40)
    assert len(pts) == 40 and len({p.key for p in pts}) == 40
    assert len(bench_points(QUICK_POINTS)) == QUICK_POINTS
    with pytest.raises(ValueError):
        bench_points(10_000)
