"""The defaults matrix of the benchmark: rows compiled as `teccl compile` runs them, and
its target (no row exits 3)."""

from __future__ import annotations

from dataclasses import replace

from devtools.runner import run_case
from devtools.suites import KB, Case, suite
from devtools.targets import evaluate_targets


def test_the_matrix_is_every_shipped_topology_collective_and_size():
    from te_ccl.spec.topology import shipped_topologies

    cases = suite("defaults-first").cases
    assert len(cases) == len(shipped_topologies()) * 8 * 4
    assert all(c.limit_s == 60 and c.first_file_only for c in cases)


def test_a_row_stopped_at_its_first_file_and_the_target_counts_exits_3():
    row, = run_case(Case("ring8", "broadcast", KB, limit_s=60, baselines=False,
                         group="defaults", first_file_only=True))
    assert row.status == "first file" and row.exit_code == 0
    assert row.first_file_s > 0 and row.ratio >= 1 and row.cpu_s > 0
    target, = evaluate_targets([row])
    assert target.met and "0 of 1 rows exit 3" in target.measured
    late = replace(row, status="exit 3: time limit of 60 s reached", exit_code=3)
    target, = evaluate_targets([row, late])
    assert not target.met and "1 of 2 rows exit 3" in target.measured


def test_a_suite_narrowed_to_some_topologies_keeps_their_rows_only():
    import pytest

    from devtools.suites import only
    from te_ccl.errors import SpecError

    narrowed = only(suite("defaults-first"), ("mesh16x16", "torus32x32"))
    assert {c.topology for c in narrowed.cases} == {"mesh16x16", "torus32x32"}
    assert len(narrowed.cases) == 2 * 8 * 4
    with pytest.raises(SpecError, match="no row on 'nosuch'"):
        only(narrowed, ("nosuch",))
    one_size = only(narrowed, sizes=(10**6,))
    assert len(one_size.cases) == 2 * 8 and {c.size_bytes for c in one_size.cases} == {10**6}
    with pytest.raises(SpecError, match="no row on 5"):
        only(narrowed, sizes=(5,))
    alltoall = only(narrowed, kinds=("alltoall",))
    assert len(alltoall.cases) == 2 * 4 and {c.kind for c in alltoall.cases} == {"alltoall"}
    with pytest.raises(SpecError, match="no row on 'allsum'"):
        only(narrowed, kinds=("allsum",))
