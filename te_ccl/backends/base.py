"""What every backend takes (besides its share of the time, a :class:`te_ccl.deadline.Budget`)
and returns.

Backends solve a :class:`~te_ccl.model.problem.Problem` (demands in epochs) and return a
:class:`SolveResult` whose transfers are in epochs from 0; :mod:`te_ccl.compiler.solve` wraps them
into a :class:`~te_ccl.schedule.Schedule`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from te_ccl.errors import SpecError
from te_ccl.schedule import Transfer

__all__ = ["BACKENDS", "FLOW_SOLVERS", "SolveParams", "SolveResult", "Progress"]

# The flow model's solvers by name: "module:function(problem, params, budget, progress)",
# imported when chosen (:mod:`te_ccl.backends.select`), so ``--backend``'s choices need no
# solver; adding one is one module and one line here.
FLOW_SOLVERS: dict[str, str] = {
    "milp": "te_ccl.backends.milp:solve_milp",
    "lp": "te_ccl.backends.lp:solve_lp",
    "rounds": "te_ccl.backends.rounds:solve_rounds",
}
# ``--backend``: auto (the portfolio, or the flow model's solver by size), a flow solver,
# or the scale backend; the compile's registry (te_ccl.compiler.candidates) runs each
BACKENDS = ("auto", *FLOW_SOLVERS, "scale")
MAX_TIME_LIMIT_S = 7 * 24 * 3600.0  # the solvers take their limit in int64 ms or int32 s fields
MAX_SEED = 2**31 - 1  # CP-SAT's random_seed is an int32
Progress = Callable[[str], None]


@dataclass(frozen=True)
class SolveParams:
    """Every solver knob in one place.

    ``epoch``: ``"fastest"`` / ``"slowest"`` / seconds (see :mod:`te_ccl.model.epochs`).
    ``max_horizon``: the largest finish epoch to try (None: automatic).
    ``round_epochs``: epochs per round of the ``rounds`` backend (None: the longest link
    occupancy, so a slow link can start a chunk in every round).
    ``deterministic``: with several threads CP-SAT interleaves its workers so that the same
    inputs and seed give the same schedule (set False to let workers race).
    ``max_subchunks``: the most sub-chunks per chunk the scale backend may cut (None: its
    plan decides); the compile lowers it when the MSCCL runtime cannot hold a schedule.
    """

    backend: str = "auto"
    time_limit_s: float = 60.0
    threads: int = 1
    seed: int = 0
    epoch: str | float = "fastest"
    max_horizon: int | None = None
    round_epochs: int | None = None
    deterministic: bool = True
    max_subchunks: int | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise SpecError(f"expected one of {', '.join(BACKENDS)}, got {self.backend!r}",
                            key="backend")
        if not (self.time_limit_s > 0 and math.isfinite(self.time_limit_s)):
            raise SpecError(f"expected a positive, finite time limit, got {self.time_limit_s}",
                            key="time-limit")
        if self.time_limit_s > MAX_TIME_LIMIT_S:
            raise SpecError(f"expected at most {MAX_TIME_LIMIT_S:.0f} s (7 days), got "
                            f"{self.time_limit_s:g}", key="time-limit")
        if not 0 <= self.seed <= MAX_SEED:
            raise SpecError(f"expected a seed in 0..{MAX_SEED}, got {self.seed}", key="seed")
        if not 1 <= self.threads <= 1024:
            raise SpecError(f"expected 1 to 1024 threads, got {self.threads}", key="threads")
        if self.round_epochs is not None and self.round_epochs < 1:
            raise SpecError(f"expected at least 1 epoch per round, got {self.round_epochs}",
                            key="round-epochs")
        if self.max_subchunks is not None and self.max_subchunks < 1:
            raise SpecError(f"expected at least 1 sub-chunk per chunk, got {self.max_subchunks}",
                            key="max-subchunks")
        if self.max_horizon is not None and self.max_horizon < 1:
            raise SpecError(f"expected a positive horizon, got {self.max_horizon}",
                            key="max-horizon")


@dataclass(frozen=True)
class SolveResult:
    """Transfers in epochs from 0; ``optimal``: the finish epoch is proven minimal."""

    transfers: tuple[Transfer, ...]
    finish_epoch: int
    optimal: bool
    status: str
    variables: int = 0
    constraints: int = 0
    notes: tuple[str, ...] = field(default=())
    backend: str = ""

