"""FRED wafers: in-switch collectives, switch routing and the wafer-scale evaluation.

The names below are what the CLI, the pipeline and the solver use; the submodules hold
the rest. FRED describes schedules and switch phases; turning phases into switch tables
is lowering (:func:`te_ccl.lower.fred.fred_tables_for`), so nothing here imports
:mod:`te_ccl.lower`.
"""

from te_ccl.fred.collectives import CommResult, FlowInfo, FredPhase, compile_fred
from te_ccl.fred.draw import draw_switch
from te_ccl.fred.evaluate import (
    Assumptions,
    Evaluation,
    evaluate,
    fabric,
    mean_comparison,
    parse_sweep,
    strategy_means,
    sweep_points,
)
from te_ccl.fred.from_schedule import Timeline, chunk_streams, schedule_timeline
from te_ccl.fred.in_switch import in_switch_candidate, in_switch_schedule
from te_ccl.fred.mesh import Mesh
from te_ccl.fred.plot import plot_evaluation
from te_ccl.fred.routing import Flow, PhaseSplit, route_phases
from te_ccl.fred.strategy import all_strategies, compile_phase, parse_strategy
from te_ccl.fred.switch import FredSwitch, build_fred
from te_ccl.fred.wafer import Wafer, wafer_from_topology
from te_ccl.fred.workload import check_strategy, load_workload, shipped_workloads

__all__ = [
    "Assumptions", "CommResult", "Evaluation", "Flow", "FlowInfo", "FredPhase", "FredSwitch",
    "Mesh", "PhaseSplit", "Wafer", "all_strategies", "build_fred", "check_strategy",
    "compile_fred", "compile_phase", "draw_switch", "evaluate", "fabric", "in_switch_candidate",
    "in_switch_schedule", "load_workload", "mean_comparison", "parse_strategy", "parse_sweep",
    "Timeline", "chunk_streams", "plot_evaluation", "route_phases", "schedule_timeline",
    "shipped_workloads", "strategy_means", "sweep_points", "wafer_from_topology",
]
