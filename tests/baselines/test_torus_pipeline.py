"""pipeline-torus: a large mesh's or torus's Broadcast and Reduce in as many pieces as the
runtime holds."""

import pytest

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.baselines.torus_pipeline import torus_applies
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.deadline import until
from te_ccl.spec.topology import load_topology
from te_ccl.topology import generators as gen
from tests.baselines.replay import file_ratio

LARGE = gen.torus([15, 15], 50e9, 0.5e-6)  # 225 GPUs: pipeline-fine cuts 892 pieces


def _rooted(kind, n, ranks=None):
    return Collective(kind, 64_000_000, tuple(ranks or range(n)), root=0)


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE], ids=lambda k: k.value)
@pytest.mark.parametrize("net", [LARGE, gen.mesh([15, 15], 50e9, 0.5e-6)], ids=["torus", "mesh"])
def test_listed_before_the_fine_pipeline_on_a_large_grid(kind, net):
    names = applicable(net, _rooted(kind, 225))
    assert names.index("pipeline-torus") + 1 == names.index("pipeline-fine")


@pytest.mark.parametrize(("net", "coll"), [
    (LARGE, _rooted(K.GATHER, 225)),
    (LARGE, _rooted(K.BROADCAST, 225, range(100))),
    (gen.torus([8, 8], 50e9), _rooted(K.BROADCAST, 64)),  # pipeline-fine holds its pieces
    (gen.star(225, 50e9), _rooted(K.BROADCAST, 225)),
], ids=["gather", "some-gpus", "small-torus", "switches"])
def test_not_where_pipeline_fine_holds_the_pieces_or_not_every_gpu_over_links(net, coll):
    assert not torus_applies(net, coll)
    with pytest.raises(BaselineError):
        build_baseline("pipeline-torus", net, coll)


def test_not_built_without_the_time_to_judge_its_file():
    with until(5.0), pytest.raises(BaselineError, match="no time left"):
        build_baseline("pipeline-torus", LARGE, _rooted(K.BROADCAST, 225))


@pytest.mark.slow
def test_torus16x16_broadcast_within_the_rooted_goal_in_a_valid_file():
    torus = load_topology("torus16x16")
    assert 1 <= file_ratio("pipeline-torus", torus, _rooted(K.BROADCAST, 256)) <= 1.10


@pytest.mark.slow
def test_a_large_mesh_cut_finer_than_pipeline_fine():
    mesh = gen.mesh([15, 15], 50e9, 0.5e-6)
    coll = _rooted(K.BROADCAST, 225)
    fine, most = (build_baseline(name, mesh, coll).collective.chunks_per_rank
                  for name in ("pipeline-fine", "pipeline-torus"))
    assert fine < most <= 1024
