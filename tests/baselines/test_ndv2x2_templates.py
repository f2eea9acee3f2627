"""Every template on NDv2 boxes (one InfiniBand GPU per box, so no switch-only path
between most GPUs): through the CLI, each builds a file ``teccl verify`` accepts or
refuses with one line and exit 2 (cannot exist) or 3 (a search gave up)."""

from __future__ import annotations

import pytest

from te_ccl.baselines import BASELINES, BaselineError, build_baseline
from te_ccl.baselines.tree import neighbour_tree
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.spec.topology import load_topology
from te_ccl.verify.schedule_check import check_schedule

KINDS = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("template", sorted(BASELINES))
def test_a_template_builds_a_valid_file_or_refuses_in_one_line(teccl, tmp_path, template,
                                                               kind):
    out = tmp_path / "x.xml"
    code, _, err = teccl("baseline", template, "ndv2x2", "-c", kind, "-s", "1MB",
                         "-o", str(out))
    if code == 0:
        vcode, vout, verr = teccl("verify", str(out))
        assert vcode == 0 and "valid" in vout, (vout, verr)
        return
    assert code in (2, 3), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("teccl: error: "), err
    assert "no path from" not in err and "needed to reduce" not in err  # says why
    assert not out.exists()


@pytest.mark.parametrize("kind", [K.ALLREDUCE, K.REDUCE])
def test_tree_reductions_sum_at_the_relaying_gpus(kind):
    topo = load_topology("ndv2x2")
    root = 0 if kind is K.REDUCE else None
    s = build_baseline("tree", topo, Collective(kind, 2**20, tuple(range(16)), root=root))
    assert check_schedule(s) == []
    # b1's partials cross the InfiniBand switch between the two boxes' gateways only
    crossing = {(t.src, t.dst) for t in s.transfers if t.op == "reduce"
                and not topo.node(t.dst).is_gpu}
    assert {src for src, _ in crossing} <= {"b0.g0", "b1.g0"}


def test_a_gpu_that_reaches_no_tree_top_is_named():
    adj = {"a": ["b"], "b": ["a"], "c": []}
    with pytest.raises(BaselineError, match="c does not reach it") as e:
        neighbour_tree(adj, "a", ["a", "b", "c"], "in t")
    assert e.value.exit_code == 2
