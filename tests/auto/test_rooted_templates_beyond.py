"""Beyond TEMPLATE_MAX_GPUS a rooted collective of few deliveries still races every
template, before a flow model whose whole chunks cannot come near the bound: a first file
far from the bound (the direct template through one switch) gives way to a template that
pipelines. Judged by the epoch model's prediction and with a flow model that gives up at
once, so nothing depends on the machine's speed."""

from __future__ import annotations

import pytest

import te_ccl.compiler.portfolio as portfolio
from te_ccl.baselines import build_baseline
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams
from te_ccl.compiler.chunking import chunking_bounds
from te_ccl.compiler.portfolio import PREDICTED, choose
from te_ccl.topology.generators import star

STAR = star(8, 50e9)
REDUCE = Collective(CollectiveKind.REDUCE, 64_000_000, tuple(range(8)), root=0)


@pytest.fixture
def beyond(monkeypatch):
    """Eight GPUs count as beyond the templates' GPU limit."""
    monkeypatch.setattr(portfolio, "TEMPLATE_MAX_GPUS", 4)


def test_a_far_first_file_gives_way_to_a_template(spied, beyond):
    calls = spied(give_up=("auto",))
    direct = build_baseline("direct", STAR, REDUCE)
    best = choose(STAR, REDUCE, SolveParams(time_limit_s=600, threads=1), PREDICTED,
                  known=(("first file: template direct", direct),))
    tree = build_baseline("tree", STAR, REDUCE)
    assert best.finish_time_s <= tree.finish_time_s < direct.finish_time_s
    assert "tree" in calls and "auto" not in calls  # the templates first, then no flow model


def test_the_flow_model_is_not_run_where_its_chunks_cannot_win(spied, beyond):
    calls = spied(give_up=("auto",))
    bound = lower_bound(STAR, REDUCE).seconds
    whole = chunking_bounds(STAR, REDUCE, [1])[1]
    assert whole > bound * (1 + portfolio.NEAR_GAP)
    best = choose(STAR, REDUCE, SolveParams(time_limit_s=600, threads=1), PREDICTED)
    assert best.finish_time_s <= whole  # switch-trees, 1.01× the bound; whole chunks 2×
    assert "auto" not in calls
    assert "flow model: skipped (its chunks cannot finish" in best.info.notes[0]
