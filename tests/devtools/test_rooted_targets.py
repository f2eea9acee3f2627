"""The rooted suite: every shipped topology's rooted collectives of 64 MB, one target."""

from devtools.runner import Row
from devtools.suites import DEFAULTS_LIMIT_S, MB, ROOTED_GOAL, ROOTED_KINDS, ROOTED_ROWS, suite
from devtools.targets import evaluate_targets
from te_ccl.spec.topology import shipped_topologies

NAME = "rooted collectives 64 MB, root 0, every shipped topology"


def row(topo: str, kind: str, ratio: float | None, status: str = "ok") -> Row:
    return Row(topology=topo, ngpus=8, collective=kind, size_bytes=64 * MB, chunks=1,
               group="rooted", system="teccl", time_s=ratio, bound_s=1.0, ratio=ratio,
               status=status)


def test_the_suite_has_every_rooted_kind_on_every_shipped_topology_from_root_0():
    cases = suite("rooted").cases
    assert {(c.topology, c.kind) for c in cases} == {
        (t, k) for t in shipped_topologies() for k in ROOTED_KINDS}
    assert {(c.root, c.size_bytes, c.limit_s) for c in cases} == {(0, 64 * MB, DEFAULTS_LIMIT_S)}
    assert len(cases) == len(ROOTED_ROWS)


def test_one_row_over_the_goal_or_without_a_file_is_short():
    rows = [row("ring8", "broadcast", 1.05), row("fc8", "reduce", ROOTED_GOAL)]
    assert {t.name: t for t in evaluate_targets(rows)}[NAME].met
    rows.append(row("dgx1", "gather", 1.19))
    target = {t.name: t for t in evaluate_targets(rows)}[NAME]
    assert not target.met and "1 of 3 rows over; worst 1.190 (dgx1 gather)" in target.measured
    rows[-1] = row("dgx1", "gather", None, status="does not lower: channels")
    target = {t.name: t for t in evaluate_targets(rows)}[NAME]
    assert not target.met and "without a file's time" in target.measured


def test_the_bound_suite_judges_each_rooted_row_on_its_own_and_default_runs_none():
    """``make bench`` runs the rooted rows in the ``bound`` suite, each a target of
    :data:`ROOTED_GOAL` naming its bound; the ``default`` suite leaves them to it."""
    rooted = {(c.topology, c.kind): c for c in suite("bound").cases
              if c.kind in ROOTED_KINDS and c.size_bytes == 64 * MB}
    assert set(rooted) == {(t, k) for t in shipped_topologies() for k in ROOTED_KINDS}
    assert {(c.root, c.group, c.limit_s) for c in rooted.values()} == {
        (0, "bound", DEFAULTS_LIMIT_S)}
    assert not [c for c in suite("default").cases
                if c.kind in ROOTED_KINDS and c.size_bytes == 64 * MB]
    rows = [Row(topology="dgx2x2", ngpus=32, collective="reduce", size_bytes=64 * MB,
                chunks=1, group="bound", system="teccl", time_s=1.2, bound_s=1.0, ratio=1.2,
                status="ok", solver_time_s=1.0)]
    target = next(t for t in evaluate_targets(rows) if t.name.startswith("dgx2x2 reduce 64 MB"))
    assert not target.met and target.goal == f"1 <= x <= {ROOTED_GOAL}"
