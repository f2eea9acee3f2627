"""Wafer evaluation: per-phase communication time and iteration time, FRED variants vs mesh.

Every phase's concurrent collectives are compiled on each fabric
(:func:`te_ccl.fred.strategy.compile_phase`); both the FRED and the mesh models are
linear in the message size, so each phase is compiled once at ``REF_BYTES`` and its
seconds per byte reused. With ``a, b, c`` = MP, DP, PP degrees, ``m`` microbatches of
``s`` samples (per DP replica) and ``F`` the NPU's sustained FLOP/s:

* stage compute per microbatch ``t_c = 3 · Σ count·fwd_flops·s / (a·c) / F``
  (backward = 2 × forward; each NPU holds 1/(a·c) of every layer's work);
* MP per microbatch and stage ``t_mp = Σ count·mp_allreduces·mp_allreduce_bytes·s / c``
  × seconds per byte of the MP phase (on the critical path);
* PP per microbatch ``t_pp = 2 · max(pp_bytes) · s`` × seconds per byte of the PP phase
  (activations forward, gradients backward);
* pipeline ``T_pipe = (m + c − 1) · (t_c + t_mp + t_pp)`` (GPipe bubble);
* DP: gradients ``params · precision / (a·c)`` per NPU, All-Reduced once per
  iteration, ``(1 − dp_overlap)`` of it exposed;
* weight streaming: ``3 · params · precision`` bytes cross the I/O controllers per
  iteration (weights in for forward and backward, gradients out), at the aggregate
  I/O line rate on FRED and at ``io_factor`` (0.65) of it on the mesh, not overlapped
  with compute; the on-wafer gradient reduction of one layer runs while the next
  layer streams, so only ``max(0, DP − I/O)`` of the DP phase is exposed;
* iteration = ``T_pipe`` + exposed DP + I/O; speedup = mesh iteration / fabric iteration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache

from te_ccl.errors import SpecError
from te_ccl.fred.mesh import WAFER_MESH, Mesh
from te_ccl.fred.strategy import Strategy, compile_phase, parse_strategy
from te_ccl.fred.wafer import VARIANTS, Wafer
from te_ccl.fred.workload import Workload

__all__ = ["FABRICS", "REF_BYTES", "FabricResult", "Evaluation", "fabric", "phase_rate",
           "evaluate"]

FABRICS = ("wafer-mesh5x4", "fred-a", "fred-b", "fred-c", "fred-d")
REF_BYTES = 1e9


@dataclass(frozen=True)
class FabricResult:
    """Iteration breakdown on one fabric, seconds; ``phase_GBps`` per-NPU effective bandwidth."""

    fabric: str
    compute_s: float
    mp_s: float
    pp_s: float
    dp_s: float
    io_s: float
    iteration_s: float
    speedup: float
    phase_GBps: dict[str, float]

    @property
    def exposed_comm_s(self) -> float:
        return self.iteration_s - self.compute_s


@dataclass(frozen=True)
class Evaluation:
    workload: str
    strategy: str
    results: tuple[FabricResult, ...]

    def result(self, fabric_name: str) -> FabricResult:
        return next(r for r in self.results if r.fabric == fabric_name)

    def to_dict(self) -> dict:
        return {"workload": self.workload, "strategy": self.strategy,
                "fabrics": [{**asdict(r), "exposed_comm_s": r.exposed_comm_s}
                            for r in self.results]}


def fabric(name: str) -> Wafer | Mesh:
    """A FRED variant (``fred-a`` .. ``fred-d``) or the mesh baseline (``wafer-mesh5x4``)."""
    return WAFER_MESH if name == WAFER_MESH.name else VARIANTS.get(name) or _unknown(name)


def _unknown(name: str) -> Wafer:
    raise SpecError(f"unknown fabric {name!r}; expected one of {', '.join(FABRICS)}",
                    key="fabric")


@lru_cache(maxsize=256)
def phase_rate(fabric_name: str, strategy: Strategy, kind: str) -> tuple[float, float]:
    """(seconds per byte, effective per-NPU bytes/s) of phase ``kind``; (0, 0) if absent."""
    result = compile_phase(fabric(fabric_name), strategy, kind, REF_BYTES)
    if result is None:
        return 0.0, 0.0
    return result.time_s / REF_BYTES, result.effective_Bps


def _breakdown(w: Workload, s: Strategy, name: str) -> tuple[float, ...]:
    a, c, m, n = s.mp, s.pp, w.microbatches, w.samples_per_microbatch
    t_c = 3 * sum(b.count * b.fwd_flops for b in w.blocks) * n / (a * c) / w.npu_flops
    mp_bytes = sum(b.count * b.mp_allreduces * b.mp_allreduce_bytes for b in w.blocks) * n / c
    t_mp = mp_bytes * phase_rate(name, s, "MP")[0]
    t_pp = 2 * max(b.pp_bytes for b in w.blocks) * n * phase_rate(name, s, "PP")[0]
    steps = m + c - 1
    grads = w.params * w.precision_bytes / (a * c)
    dp = (1 - w.dp_overlap) * grads * phase_rate(name, s, "DP")[0]
    io = 0.0
    if w.weight_streaming:
        f = fabric(name)
        factor = f.io_factor if isinstance(f, Mesh) else 1.0
        io = 3 * w.params * w.precision_bytes / (f.io_controllers * f.io_Bps * factor)
        dp = max(0.0, dp - io)
    return steps * t_c, steps * t_mp, steps * t_pp, dp, io


def evaluate(workload: Workload, strategy: str | None = None,
             fabrics: Sequence[str] = FABRICS) -> Evaluation:
    """Iteration time of ``workload`` on every fabric (module docstring), mesh first."""
    s = parse_strategy(strategy or workload.strategy)
    names = [WAFER_MESH.name, *(f for f in fabrics if f != WAFER_MESH.name)]
    rows = {}
    for name in names:
        fabric(name)
        compute, mp, pp, dp, io = _breakdown(workload, s, name)
        bw = {k: phase_rate(name, s, k)[1] / 1e9 for k in ("MP", "PP", "DP")}
        rows[name] = (compute, mp, pp, dp, io, compute + mp + pp + dp + io, bw)
    mesh_iter = rows[WAFER_MESH.name][5]
    results = tuple(FabricResult(name, *r[:6], mesh_iter / r[5], r[6])
                    for name, r in rows.items() if name in fabrics)
    return Evaluation(workload.name, s.name, results)
