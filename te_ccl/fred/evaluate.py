"""Wafer evaluation: per-phase communication and iteration time, FRED variants vs the mesh.

Every number comes from the workload's published configuration (:mod:`te_ccl.fred.workload`)
and one record of :class:`Assumptions` shared by all workloads; nothing is set per
workload to land on a published figure, and every assumption is reported with the result.

Every phase's concurrent collectives are compiled on each fabric
(:func:`te_ccl.fred.strategy.compile_phase`); both the FRED and the mesh models are
linear in the message size, so each phase is compiled once at ``REF_BYTES`` and its
seconds per byte reused. With ``a, b, c`` = MP, DP, PP degrees, ``B`` the global batch,
``m`` microbatches (1 without a pipeline), ``n = B/(b·m)`` samples per microbatch and
replica, ``F = peak · efficiency`` and ``p`` bytes per element:

* stage compute per microbatch ``t_c = (1 + backward) · Σ count·fwd_flops·n / (a·c) / F``
  (each NPU holds 1/(a·c) of every layer's work);
* a phase's time is its fixed part (latency of its dependent steps, switch
  reconfigurations: :attr:`CommResult.fixed_s`, with the wire and µSwitch latencies of
  the assumptions) once per collective, plus its bytes × its seconds per byte;
* MP per microbatch and stage ``Σ count·mp_allreduces·mp_allreduce_elements·p·n / c`` bytes
  in ``Σ count·mp_allreduces / c`` All-Reduces (on the critical path);
* PP per microbatch ``2 · max(pp_elements)·p·n`` bytes (activations forward, gradients
  backward) in 2 sends;
* pipeline ``(m + c − 1) · (t_c + t_mp + t_pp)`` (GPipe bubble);
* DP: gradients ``params·p / (a·c)`` per NPU, All-Reduced once per iteration (one
  collective),
  ``(1 − dp_overlap)`` of it exposed;
* weight streaming: ``3·params·p`` bytes cross the I/O controllers per iteration (weights
  in for forward and backward, gradients out) at their aggregate line rate on FRED and at
  the mesh's ``io_factor`` of it, not overlapped with compute; the on-wafer gradient
  reduction of one layer runs while the next layer streams, so only ``max(0, DP − I/O)``
  of the DP phase is exposed;
* iteration = pipeline + exposed DP + I/O; speedup = mesh iteration / fabric iteration;
  exposed communication = iteration − compute (the bubble counts as compute);
* the mesh's model runs hierarchical and logical rings, which a better mesh schedule may
  beat: ``speedup_vs_mesh_bound`` and ``exposed_comm_reduction_vs_mesh_bound`` divide
  instead the iteration (its exposed communication) the mesh would take if every phase
  met its lower bound (:func:`mesh_bound_time`: each collective alone, and all of them
  across the mesh's straight cuts), so a fabric's advantage over any mesh schedule is at
  least that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from typing import Any

from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.errors import SpecError
from te_ccl.fred.mesh import Mesh, wafer_mesh
from te_ccl.fred.strategy import Strategy, compile_phase, parse_strategy, phase_candidates
from te_ccl.fred.wafer import VARIANTS, Wafer, wafer_variant
from te_ccl.fred.workload import Workload, check_strategy
from te_ccl.topology import generators as gen
from te_ccl.topology.generators import USWITCH_LATENCY_S, WIRE_LATENCY_S

__all__ = ["FABRICS", "REF_BYTES", "Assumptions", "FabricResult", "Evaluation", "fabric",
           "phase_models", "phase_time", "phase_rate", "mesh_bound_models",
           "mesh_cut_rate", "mesh_bound_time", "evaluate", "parse_sweep", "sweep_points", "strategy_means"]

FABRICS = ("wafer-mesh5x4", "fred-a", "fred-b", "fred-c", "fred-d")
REF_BYTES = 1e9


_WHY = {
    "peak_flops": "NPU peak FLOP/s: an H100-class NPU's dense FP16 tensor rate (the FRED paper)",
    "efficiency": "share of peak sustained on every workload (one value for all)",
    "backward": "backward pass FLOPs per forward FLOP",
    "microbatches": "microbatches per iteration when PP > 1 (GPipe; the paper's 8)",
    "dp_overlap": "share of the DP All-Reduce hidden behind compute",
    "global_batch": "samples per iteration (default: the workload's published batch)",
    "precision_bytes": "bytes per parameter, gradient and activation (default: workload)",
    "wire_latency_s": "one on-wafer wire between neighbours (assumed: the paper gives none)",
    "uswitch_latency_s": "one µSwitch stage; a FRED_m(P) has 2·ceil(log2 P)-1, a mesh "
                         "router is timed as FRED_3(5) (assumed)",
}


@dataclass(frozen=True)
class Assumptions:
    """What the evaluation assumes beyond the workload's published configuration.

    ``global_batch`` / ``precision_bytes`` None: the workload's own (published) values.
    """

    peak_flops: float = 989e12  # H100 SXM dense FP16/BF16 tensor peak (NVIDIA datasheet)
    efficiency: float = 0.5  # sustained share of peak on these models
    backward: float = 2.0  # backward FLOPs per forward FLOP
    microbatches: int = 8  # per iteration when pipelined (the paper's setting)
    dp_overlap: float = 0.0  # share of the DP All-Reduce hidden behind compute
    global_batch: float | None = None
    precision_bytes: int | None = None
    wire_latency_s: float = WIRE_LATENCY_S
    uswitch_latency_s: float = USWITCH_LATENCY_S

    @property
    def flops(self) -> float:
        return self.peak_flops * self.efficiency

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """One line per assumption: value and meaning (the table footer)."""
        return [f"{k} = {'workload' if v is None else format(v, 'g')}: {_WHY[k]}"
                for k, v in self.to_dict().items()]


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
    exposed_comm_reduction: float  # the mesh's exposed communication / this fabric's
    speedup_vs_mesh_bound: float  # the mesh's iteration at its phases' bounds / this one
    exposed_comm_reduction_vs_mesh_bound: float  # the same for the exposed communication

    @property
    def exposed_comm_s(self) -> float:
        return self.iteration_s - self.compute_s


STRATEGY_MEAN_METRICS = frozenset({"exposed_comm_reduction"})
"""Published figures that are means over parallelization strategies: one strategy's
prediction is not comparable with them, the mean over strategies is (:func:`mean_comparison`)."""


@dataclass(frozen=True)
class Evaluation:
    workload: str
    strategy: str
    results: tuple[FabricResult, ...]
    assumptions: Assumptions
    global_batch: float
    paper: dict[str, Any] | None = None
    npus: int = 20

    def result(self, fabric_name: str) -> FabricResult:
        return next(r for r in self.results if r.fabric == fabric_name)

    def comparison(self) -> list[dict[str, Any]]:
        """Each published figure of the workload next to this strategy's prediction, and
        their ratio where ``comparable`` (not for :data:`STRATEGY_MEAN_METRICS`; the
        paper's wafer has 20 NPUs: none on other sizes)."""
        out: list[dict[str, Any]] = []
        if self.npus != 20:
            return out
        for metric, by_fabric in (self.paper or {}).items():
            comparable = metric not in STRATEGY_MEAN_METRICS
            for name, published in by_fabric.items():
                predicted = getattr(self.result(name), metric)
                out.append({"metric": metric, "fabric": name, "paper": published,
                            "predicted": predicted, "comparable": comparable,
                            "ratio": predicted / published if comparable else None})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "strategy": self.strategy, "npus": self.npus,
                "global_batch": self.global_batch,
                "assumptions": self.assumptions.to_dict(),
                "fabrics": [{**asdict(r), "exposed_comm_s": r.exposed_comm_s}
                            for r in self.results],
                "paper": self.comparison()}


def fabric(name: str, npus: int = 20, wire_latency_s: float = WIRE_LATENCY_S,
           uswitch_latency_s: float = USWITCH_LATENCY_S) -> Wafer | Mesh:
    """A FRED variant (``fred-a`` .. ``fred-d``) or the mesh baseline (``wafer-mesh…``)
    for a wafer of ``npus`` NPUs (:func:`te_ccl.fred.wafer.wafer_variant`, :func:`wafer_mesh`)
    with these latencies."""
    if name.startswith("wafer-mesh"):
        base: Wafer | Mesh = wafer_mesh(npus)
    elif name in VARIANTS:
        base = wafer_variant(name, npus)
    else:
        raise SpecError(f"unknown fabric {name!r}; expected one of {', '.join(FABRICS)}",
                        key="fabric")
    if (base.wire_latency_s, base.uswitch_latency_s) == (wire_latency_s, uswitch_latency_s):
        return base
    return replace(base, wire_latency_s=wire_latency_s, uswitch_latency_s=uswitch_latency_s)


@lru_cache(maxsize=512)
def phase_models(fabric_name: str, strategy: Strategy, kind: str,
                 latencies: tuple[float, float] = (WIRE_LATENCY_S, USWITCH_LATENCY_S)
                 ) -> tuple[tuple[float, float], ...]:
    """(fixed seconds per collective, seconds per byte) of every way phase ``kind`` can run
    (:func:`phase_candidates`) on the wafer of ``strategy.npus`` NPUs with (wire,
    µSwitch) ``latencies``; empty if the phase is absent."""
    fab = fabric(fabric_name, strategy.npus, *latencies)
    return tuple((r.fixed_s, (r.time_s - r.fixed_s) / REF_BYTES)
                 for r in phase_candidates(fab, strategy, kind, REF_BYTES))


def phase_time(fabric_name: str, strategy: Strategy, kind: str, latencies: tuple[float, float],
               collectives: float, n_bytes: float) -> float:
    """Seconds of ``collectives`` runs of phase ``kind`` moving ``n_bytes`` in all, the
    fastest way at that size (a reducing switch may also just forward)."""
    return min((collectives * fixed + n_bytes * rate
                for fixed, rate in phase_models(fabric_name, strategy, kind, latencies)),
               default=0.0)


@lru_cache(maxsize=512)
def phase_rate(fabric_name: str, strategy: Strategy, kind: str,
               latencies: tuple[float, float] = (WIRE_LATENCY_S, USWITCH_LATENCY_S)) -> float:
    """Effective per-NPU bytes/s of phase ``kind`` at ``REF_BYTES`` (0 if absent)."""
    result = compile_phase(fabric(fabric_name, strategy.npus, *latencies), strategy, kind,
                           REF_BYTES)
    return 0.0 if result is None else result.effective_Bps


@lru_cache(maxsize=512)
def mesh_bound_models(strategy: Strategy, kind: str, latencies: tuple[float, float]
                      ) -> tuple[tuple[float, float], ...]:
    """(latency seconds, seconds per byte) of the lower bound
    (:func:`te_ccl.bounds.lower_bound`) of each collective of phase ``kind`` alone on the
    wafer mesh of ``strategy.npus`` NPUs (a PP send is a Broadcast from one NPU to one)."""
    topo = gen.wafer_mesh(strategy.npus, wire_latency_s=latencies[0],
                          uswitch_latency_s=latencies[1])
    size = int(REF_BYTES)
    out = []
    for op in strategy.phase_ops(kind, REF_BYTES):
        colls = ([Collective(CollectiveKind.ALLREDUCE, size, op.ranks)] if op.kind == "allreduce"
                 else [Collective(CollectiveKind.BROADCAST, size, pair, root=pair[0])
                       for pair in op.pairs])
        for c in colls:
            b = lower_bound(topo, c)  # the size's part of each: fixed α seconds do not scale
            out.append((b.parts.get("alpha_s", 0.0),
                        max(v for k, v in b.proportional.items() if k != "alpha_s")
                        / REF_BYTES))
    return tuple(out)


@lru_cache(maxsize=512)
def mesh_cut_rate(strategy: Strategy, kind: str) -> float:
    """Seconds per byte that phase ``kind``'s collectives, run together, need across the
    wafer mesh's straight cuts (between two rows or two columns): an All-Reduce with
    members on both sides moves its size across each way, a send its size one way, and
    a cut carries one link per row (column) each way."""
    mesh = wafer_mesh(strategy.npus)
    cuts = [(axis, k) for axis, size in ((0, mesh.rows), (1, mesh.cols)) for k in range(size - 1)]
    worst = 0.0
    for axis, k in cuts:
        links = mesh.cols if axis == 0 else mesh.rows
        lower = [mesh.coord(r)[axis] <= k for r in range(strategy.npus)]
        across = {True: 0.0, False: 0.0}  # bytes leaving the lower side, entering it
        for op in strategy.phase_ops(kind, REF_BYTES):
            if op.kind == "allreduce":
                if len({lower[r] for r in op.ranks}) == 2:
                    across[True] += REF_BYTES
                    across[False] += REF_BYTES
            else:
                for a, b in op.pairs:
                    if lower[a] != lower[b]:
                        across[lower[a]] += REF_BYTES
        worst = max(worst, max(across.values()) / (links * mesh.link_Bps))
    return worst / REF_BYTES


def mesh_bound_time(strategy: Strategy, kind: str, latencies: tuple[float, float],
                    collectives: float, n_bytes: float) -> float:
    """A lower bound on ``collectives`` runs of phase ``kind`` moving ``n_bytes`` in all on
    the wafer mesh: each run takes at least its slowest collective's bound alone, and the
    runs together what the straight cuts need (:func:`mesh_cut_rate`)."""
    if not collectives:
        return 0.0
    alone = max((collectives * max(alpha, n_bytes / collectives * rate)
                 for alpha, rate in mesh_bound_models(strategy, kind, latencies)), default=0.0)
    return max(alone, n_bytes * mesh_cut_rate(strategy, kind))


def _breakdown(w: Workload, s: Strategy, name: str, a: Assumptions, *,
               bound: bool = False) -> tuple[float, ...]:
    """Compute, MP, PP, DP and I/O seconds of an iteration on fabric ``name``; ``bound``:
    on the mesh with every phase at its lower bound."""
    p = a.precision_bytes or w.precision_bytes
    batch = a.global_batch or w.global_batch
    m = a.microbatches if s.pp > 1 else 1
    n = batch / (s.dp * m)
    work = (1 + a.backward) * sum(b.count * b.fwd_flops for b in w.blocks)
    t_c = work * n / (s.mp * s.pp) / a.flops
    mp_bytes = sum(b.count * b.mp_allreduces * b.mp_allreduce_elements
                   for b in w.blocks) * p * n / s.pp
    lat = (a.wire_latency_s, a.uswitch_latency_s)

    def time(kind: str, collectives: float, n_bytes: float) -> float:
        return (mesh_bound_time(s, kind, lat, collectives, n_bytes) if bound else
                phase_time(name, s, kind, lat, collectives, n_bytes))

    mp_ops = sum(b.count * b.mp_allreduces for b in w.blocks) / s.pp
    t_mp = time("MP", mp_ops, mp_bytes)
    t_pp = time("PP", 2, 2 * max(b.pp_elements for b in w.blocks) * p * n)
    steps = m + s.pp - 1
    grads = w.params * p / (s.mp * s.pp)
    dp = (1 - a.dp_overlap) * time("DP", 1, grads)
    io = 0.0
    if w.weight_streaming:
        f = fabric(name, s.npus)
        factor = f.io_factor if isinstance(f, Mesh) else 1.0
        io = 3 * w.params * p / (f.io_controllers * f.io_Bps * factor)
        dp = max(0.0, dp - io)
    return steps * t_c, steps * t_mp, steps * t_pp, dp, io


def evaluate(workload: Workload, strategy: str | None = None,
             fabrics: Sequence[str] = FABRICS,
             assumptions: Assumptions = Assumptions(), npus: int = 20) -> Evaluation:
    """Iteration time of ``workload`` on every fabric of a wafer of ``npus`` NPUs (module
    docstring), the mesh first; ``strategy`` None: the workload's when it fits ``npus``,
    else pure DP.

    Raises
    ------
    SpecError
        A strategy whose product is not the wafer's NPU count, or that the workload cannot
        run as modelled (:func:`te_ccl.fred.workload.check_strategy`).
    """
    s = parse_strategy(strategy or _default_strategy(workload, npus), npus)
    check_strategy(workload, s.mp, s.pp)
    mesh_name = wafer_mesh(npus).name
    names = [mesh_name, *(fabric(f, npus).name for f in fabrics
                          if not f.startswith("wafer-mesh"))]
    rows = {}
    for name in names:
        compute, mp, pp, dp, io = _breakdown(workload, s, name, assumptions)
        lat = (assumptions.wire_latency_s, assumptions.uswitch_latency_s)
        bw = {k: phase_rate(name, s, k, lat) / 1e9 for k in ("MP", "PP", "DP")}
        rows[name] = (compute, mp, pp, dp, io, compute + mp + pp + dp + io, bw)
    mesh = rows[mesh_name]
    mesh_exposed = mesh[5] - mesh[0]
    mesh_bound = sum(_breakdown(workload, s, mesh_name, assumptions, bound=True))

    def cut(exposed: float, r: tuple) -> float:
        return exposed / (r[5] - r[0]) if r[5] > r[0] else float("inf")

    results = tuple(FabricResult(name, *r[:6], mesh[5] / r[5], r[6], cut(mesh_exposed, r),
                                 mesh_bound / r[5], cut(mesh_bound - mesh[0], r))
                    for name, r in rows.items())
    return Evaluation(workload.name, s.name, results, assumptions,
                      assumptions.global_batch or workload.global_batch, workload.paper, npus)


def _default_strategy(workload: Workload, npus: int) -> str:
    """The workload's strategy, or on another wafer size the same MP and PP with the DP
    degree that fills it (pure DP where they do not divide the NPU count)."""
    s = parse_strategy(workload.strategy)
    if npus % (s.mp * s.pp):
        return f"DP{npus}"
    return f"MP{s.mp}-DP{npus // (s.mp * s.pp)}-PP{s.pp}"


_SWEEPABLE = {f.name: f for f in fields(Assumptions)}


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """``KEY=v1,v2,...`` with KEY a field of :class:`Assumptions`."""
    key, _, values = text.partition("=")
    key = key.strip()
    if key not in _SWEEPABLE:
        raise SpecError(f"expected KEY=v1,v2 with KEY one of {', '.join(_SWEEPABLE)}, "
                        f"got {text!r}", key="--sweep")
    try:
        numbers = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"expected numbers after {key}=, got {values!r}", key="--sweep") from None
    if not numbers or any(v < 0 for v in numbers):
        raise SpecError(f"expected non-negative numbers after {key}=", key="--sweep")
    if key in ("microbatches", "precision_bytes") and any(v != int(v) or v < 1
                                                         for v in numbers):
        raise SpecError(f"{key} takes positive whole numbers", key="--sweep")
    return key, numbers


def sweep_points(base: Assumptions, sweeps: Sequence[tuple[str, list[float]]]
                 ) -> list[tuple[str, Assumptions]]:
    """Every combination of the swept values, each with a label such as ``efficiency=0.3``."""
    points: list[tuple[str, Assumptions]] = [("", base)]
    for key, values in sweeps:
        cast = int if key in ("microbatches", "precision_bytes") else float
        points = [(f"{label} {key}={v:g}".strip(), replace(a, **{key: cast(v)}))
                  for label, a in points for v in values]
    return points


def strategy_means(evaluations: Sequence[Evaluation]) -> dict[str, dict[str, float]]:
    """Per fabric, the arithmetic mean of the speedup and of the exposed-communication cut,
    each against the mesh's model and against its bound, over ``evaluations`` (one
    workload under several strategies): the paper reports its exposed-communication cuts
    averaged over parallelization strategies."""
    out: dict[str, dict[str, float]] = {}
    for r in evaluations[0].results:
        rows = [ev.result(r.fabric) for ev in evaluations]
        out[r.fabric] = {k: sum(getattr(x, k) for x in rows) / len(rows)
                         for k in ("speedup", "exposed_comm_reduction", "speedup_vs_mesh_bound",
                                   "exposed_comm_reduction_vs_mesh_bound")}
    return out


def mean_comparison(evaluations: Sequence[Evaluation]) -> list[dict[str, Any]]:
    """The workload's published :data:`STRATEGY_MEAN_METRICS` next to the mean of the
    prediction over ``evaluations`` (one workload under several strategies, named in
    ``strategies``), and their ratio; none off the paper's 20-NPU wafer."""
    first = evaluations[0]
    if first.npus != 20:
        return []
    means = strategy_means(evaluations)
    strategies = [ev.strategy for ev in evaluations]
    return [{"metric": metric, "fabric": name, "paper": published,
             "predicted": means[name][metric], "ratio": means[name][metric] / published,
             "strategies": strategies}
            for metric, by_fabric in (first.paper or {}).items()
            if metric in STRATEGY_MEAN_METRICS for name, published in by_fabric.items()]
