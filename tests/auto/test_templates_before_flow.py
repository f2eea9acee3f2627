"""auto judges the templates before a flow model that is large by counting while the best
so far is far from the bound, so a short limit does not go whole to the model; a small
model, or a best near the bound, keeps the flow model first. Decided by counting alone:
the flow model here is a stub that gives up at once."""

from __future__ import annotations

import pytest

import te_ccl.compiler.portfolio as portfolio
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.compiler.portfolio import Judge
from te_ccl.topology.generators import ring

RING = ring(8, 50e9)


@pytest.mark.parametrize(("chunks", "scale_ratio", "templates_first"), [
    (8, 2.0, True),     # 8 ranks × 8 chunks × 16 links: 1024 chunk-link pairs, best 2× the bound
    (1, 2.0, False),    # 128 pairs: the flow model is small
    (8, 1.01, False),   # the best is within NEAR_GAP of the bound
], ids=["costly-far", "small", "near"])
def test_templates_before_a_costly_flow_model(spied, chunks, scale_ratio, templates_first):
    calls = spied(give_up=("auto",))
    coll = Collective(CollectiveKind.ALLGATHER, 64 << 14, tuple(range(8)),
                      chunks_per_rank=chunks)
    assert portfolio.flow_costly(RING, coll) is (chunks == 8)
    bound = lower_bound(RING, coll).seconds
    judge = Judge("test", lambda s: bound * scale_ratio if s.info.backend == "scale"
                  else max(s.finish_time_s, bound * 1.5))
    solve(RING, coll, SolveParams(time_limit_s=600, threads=1), judge=judge)
    assert "auto" in calls and "ring" in calls
    assert (calls.index("ring") < calls.index("auto")) is templates_first
