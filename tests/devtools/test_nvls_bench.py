"""devtools.nvls_bench: the box plan row's plan part (written, checked, replayed) and the
tables; the compiles are what `make bench` runs."""

from __future__ import annotations

from devtools.nvls_bench import BoxRow, Row, _box_table, _table, box_plan
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.spec.topology import load_topology


def test_box_plan_is_written_checked_and_replayed_above_the_bound(tmp_path):
    path = tmp_path / "p.json"
    topo = load_topology("hgx-h100x2")
    plan_s, link_s = box_plan(topo, path)
    coll = Collective(CollectiveKind.ALLREDUCE, 10**9, tuple(range(topo.ngpus)), 1)
    assert path.read_bytes().startswith(b"{")
    assert plan_s >= max(link_s, lower_bound(topo, coll).seconds)


def test_tables_name_every_row():
    row = Row("m", "--chunks auto", 1.0, 0.99, 1.0, 1.6, 0.6, 1.5, 1.6, 1.01, 1.62, "plan replay")
    assert row.met and "| m | --chunks auto |" in _table([row])
    box = BoxRow("b", 3e-3, 2.5e-3, 1.2, 2.9e-3, 4e-3, 1.33, "plan replay, xml replay")
    assert "| b | 3.000 | 2.500 | 1.200 |" in _box_table([box])
