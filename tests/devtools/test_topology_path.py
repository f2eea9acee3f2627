"""The topology's path: both counts are of the same stops, the first candidate's ending at
its replay."""

from devtools.topology_path import climbs, first_candidate

STOPS = ["te_ccl.spec.collective.load_collective", "te_ccl.model.footprint.check_fits",
         "te_ccl.bounds.lower_bound", "te_ccl.backends.scale.plan.scale_method",
         "te_ccl.lower.fred.check_msccl_can_express", "te_ccl.simulate.msccl.simulate_msccl",
         "te_ccl.baselines.build_baseline", "te_ccl.simulate.msccl.simulate_msccl"]


def test_the_first_candidate_ends_at_the_first_replay():
    assert first_candidate(STOPS) == STOPS[:6]
    assert first_candidate(STOPS[:3]) == STOPS[:3]  # nothing replayed: every stop


def test_a_climb_is_a_stop_on_a_lower_layer_than_the_one_before():
    # footprint (model) -> bounds, lowering -> replay, template -> replay
    assert (climbs(STOPS), climbs(first_candidate(STOPS))) == (3, 2)
