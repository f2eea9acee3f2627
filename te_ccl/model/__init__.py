"""The TE-CCL time-expanded flow model: problem, time-expanded network, constraints, extraction."""

from te_ccl.model.epochs import EPOCH_POLICIES, LinkTiming, epoch_duration, link_timing
from te_ccl.model.formulation import Formulation, formulate
from te_ccl.model.problem import Demand, Problem, State, build_problem, demands_of, make_problem
from te_ccl.model.ten import TimeExpandedNetwork

__all__ = ["EPOCH_POLICIES", "LinkTiming", "epoch_duration", "link_timing", "Formulation",
           "formulate", "Demand", "Problem", "State", "build_problem", "demands_of",
           "make_problem", "TimeExpandedNetwork"]
