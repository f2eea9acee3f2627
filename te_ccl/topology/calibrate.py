"""Fit α (latency) and β (bandwidth) of a topology's links from nccl-tests measurements.

Each nccl-tests table is fitted by least squares to the α-β cost of the algorithm NCCL
ran on its ``n`` ranks, ``T(S) = steps·α + factor·S/β`` for a buffer of ``S`` bytes:

==============  =========  =================  ====================
collective      algorithm  steps              factor
==============  =========  =================  ====================
allreduce       ring       2(n-1)             2(n-1)/n
allreduce       tree       2⌈log2 n⌉          1
allgather       ring       n-1                (n-1)/n
reducescatter   ring       n-1                (n-1)/n
alltoall        direct     1                  (n-1)/n
sendrecv        p2p        1                  1
==============  =========  =================  ====================

The fit minimises the *relative* error of every sample (rows are divided by the
measured time), so the small sizes that carry α weigh as much as the large ones that
carry β. The result is applied to the *bottleneck class* of the ring the ranks form
(ranks 0..n-1 in topology order, consecutive ranks joined by fewest-hop paths): the
links of the same kind, bandwidth and latency as the slowest links on that ring. They
all get bandwidth β; their latency is what remains of α once the other links on the
longest ring step have had theirs, shared equally among the class links on that step.

>>> from te_ccl.topology.generators import star
>>> import numpy as np
>>> sizes = np.logspace(3, 9, 13)
>>> times = 14 * 2e-6 + 14 / 8 * sizes / 200e9      # ring allreduce, 8 ranks
>>> f = fit_samples(sizes, times, *cost_terms("allreduce", "ring", 8))
>>> round(f.alpha_s * 1e6, 3), round(f.beta_Bps / 1e9, 3)
(2.0, 200.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import networkx as nx
import numpy as np

from te_ccl.errors import SpecError
from te_ccl.topology.model import Link, Topology
from te_ccl.topology.nccl_tests import Table

__all__ = ["ALGORITHMS", "Fit", "Applied", "cost_terms", "fit_samples", "fit_table",
           "apply_fit"]

ALGORITHMS = {"allreduce": ("ring", "tree"), "allgather": ("ring",),
              "reducescatter": ("ring",), "alltoall": ("direct",), "sendrecv": ("p2p",)}


def cost_terms(collective: str, algorithm: str, n: int) -> tuple[float, float]:
    """(steps, factor) of ``T = steps·α + factor·S/β`` for ``n`` ranks."""
    if collective not in ALGORITHMS or algorithm not in ALGORITHMS[collective]:
        raise SpecError(f"no α-β model for {collective} with algorithm {algorithm!r}; "
                        f"expected one of: {', '.join(ALGORITHMS.get(collective, ()))}",
                        key="--algorithm")
    if n < 2:
        raise SpecError(f"expected at least 2 ranks, got {n}", key="--ranks")
    return {("allreduce", "ring"): (2 * (n - 1), 2 * (n - 1) / n),
            ("allreduce", "tree"): (2 * math.ceil(math.log2(n)), 1.0),
            ("allgather", "ring"): (n - 1, (n - 1) / n),
            ("reducescatter", "ring"): (n - 1, (n - 1) / n),
            ("alltoall", "direct"): (1, (n - 1) / n),
            ("sendrecv", "p2p"): (1, 1.0)}[(collective, algorithm)]


@dataclass(frozen=True)
class Fit:
    """α per step (s), β (bytes/s) and the relative residuals of the fit."""

    alpha_s: float
    beta_Bps: float
    rms_rel: float
    max_rel: float
    samples: int


def fit_samples(sizes, times, steps: float, factor: float, file: str = "measurements") -> Fit:
    """Least-squares α and β of ``times ≈ steps·α + factor·sizes/β`` in relative error."""
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    if len(np.unique(s)) < 2:
        raise SpecError("expected measurements at 2 or more sizes to fit α and β", file=file)
    a = np.column_stack([np.full_like(s, steps), factor * s]) / t[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if alpha < 0:  # α below the noise: fit β alone
        alpha = 0.0
        inv_beta = float(np.dot(a[:, 1], np.ones_like(t)) / np.dot(a[:, 1], a[:, 1]))
    if inv_beta <= 0 or factor * s.max() * inv_beta < 0.01 * t.max():
        raise SpecError("times do not grow with size; cannot fit a bandwidth (expected "
                        "sizes up to at least a few MB)", file=file)
    rel = (steps * alpha + factor * s * inv_beta - t) / t
    return Fit(float(alpha), float(1 / inv_beta), float(np.sqrt(np.mean(rel ** 2))),
               float(np.max(np.abs(rel))), len(s))


def fit_table(table: Table, collective: str, algorithm: str, nranks: int) -> Fit:
    steps, factor = cost_terms(collective, algorithm, nranks)
    return fit_samples([x.size_bytes for x in table.samples], [x.time_s for x in table.samples],
                       steps, factor, table.file)


@dataclass(frozen=True)
class Applied:
    """Where a fit went: the class of links it set, and their new numbers."""

    kind: str
    links: int
    bandwidth_Bps: float
    latency_s: float


def _ring_paths(topo: Topology, nranks: int) -> list[list[tuple[str, str]]]:
    ranks = list(topo.gpus[:nranks])
    g = topo.graph()
    paths = []
    for a, b in zip(ranks, ranks[1:] + ranks[:1], strict=True):
        nodes = nx.shortest_path(g, a, b)
        paths.append(list(zip(nodes, nodes[1:], strict=False)))
    return paths


def _class(topo: Topology, k: Link) -> tuple:
    """Links of one class: the same node kinds at the ends (either way), bandwidth, latency."""
    ends = tuple(sorted(topo.node(x).kind.value for x in k.key))
    return ends, k.bandwidth_Bps, k.latency_s


def apply_fit(topo: Topology, fit: Fit, nranks: int) -> tuple[Topology, Applied]:
    """``topo`` with the fit applied to the bottleneck class of the ranks' ring."""
    if nranks > topo.ngpus:
        raise SpecError(f"the measurements ran on {nranks} ranks but {topo.name} has "
                        f"{topo.ngpus} GPUs", key="--ranks")
    paths = _ring_paths(topo, nranks)
    ring = [topo.link(*k) for p in paths for k in p]
    slowest = min(k.bandwidth_Bps for k in ring)
    classes = {_class(topo, k) for k in ring if k.bandwidth_Bps == slowest}
    worst = [topo.link(*k) for k in max(paths, key=len)]
    members = [k for k in worst if _class(topo, k) in classes]
    others = sum(k.latency_s for k in worst if _class(topo, k) not in classes)
    latency = max(fit.alpha_s - others, 0.0) / max(len(members), 1)
    chosen = [k for k in topo.links if _class(topo, k) in classes]
    links = tuple(replace(k, bandwidth_Bps=fit.beta_Bps, latency_s=latency)
                  if _class(topo, k) in classes else k for k in topo.links)
    kind = "/".join(sorted({"-".join(_class(topo, k)[0]) for k in chosen}))
    return replace(topo, links=links), Applied(kind, len(chosen), fit.beta_Bps, latency)
