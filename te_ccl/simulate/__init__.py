"""Event-driven α-β simulation of schedules and MSCCL XML, independent of the solver."""

from te_ccl.simulate.engine import Task, TaskTimes, run
from te_ccl.simulate.replay import chain_length, simulate_schedule
from te_ccl.simulate.result import Interval, LinkUse, SimResult

__all__ = ["Task", "TaskTimes", "run", "simulate_schedule", "chain_length", "SimResult",
           "LinkUse", "Interval"]
