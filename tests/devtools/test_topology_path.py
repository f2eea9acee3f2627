"""The topology's path: the judge's read-backs are not stops (they are counted apart), the
first candidate's stops end at the first read-back."""

from devtools.topology_path import Stop, climbs, first_candidate, path

STOPS = [Stop("te_ccl.spec.collective.load_collective"), Stop("te_ccl.model.footprint.check_fits"),
         Stop("te_ccl.bounds.lower_bound"), Stop("te_ccl.backends.scale.plan.scale_method"),
         Stop("te_ccl.simulate.msccl.simulate_msccl", read_back=True),
         Stop("te_ccl.backends.scale.plan.scale_method"),
         Stop("te_ccl.baselines.build_baseline"),
         Stop("te_ccl.simulate.msccl.simulate_msccl", read_back=True),
         Stop("te_ccl.fred.in_switch.in_switch_candidate")]


def test_the_first_candidate_ends_before_the_first_read_back():
    assert first_candidate(STOPS) == [s.name for s in STOPS[:4]]
    assert first_candidate(STOPS[:3]) == [s.name for s in STOPS[:3]]  # no read-back


def test_read_backs_are_left_out_of_the_path_unless_asked_for():
    # the two scale_method calls around the first read-back are one stop without it
    assert len(path(STOPS)) == 6 and len(path(STOPS, read_backs=True)) == 9


def test_a_climb_is_a_stop_on_a_lower_layer_than_the_one_before():
    # footprint (model) -> bounds; counted as stops, each read-back after a backend climbs
    assert (climbs(path(STOPS)), climbs(path(STOPS, read_backs=True))) == (1, 3)
