"""The rooted suite: every shipped topology's rooted collectives of 64 MB, one target."""

from devtools.runner import Row
from devtools.suites import MB, ROOTED_GOAL, ROOTED_KINDS, suite
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
    assert {(c.root, c.size_bytes) for c in cases} == {(0, 64 * MB)}


def test_one_row_over_the_goal_or_without_a_file_is_short():
    rows = [row("ring8", "broadcast", 1.05), row("fc8", "reduce", ROOTED_GOAL)]
    assert {t.name: t for t in evaluate_targets(rows)}[NAME].met
    rows.append(row("dgx1", "gather", 1.19))
    target = {t.name: t for t in evaluate_targets(rows)}[NAME]
    assert not target.met and "1 of 3 rows over; worst 1.190 (dgx1 gather)" in target.measured
    rows[-1] = row("dgx1", "gather", None, status="does not lower: channels")
    target = {t.name: t for t in evaluate_targets(rows)}[NAME]
    assert not target.met and "without a file's time" in target.measured
