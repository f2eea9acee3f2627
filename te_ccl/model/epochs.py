"""Epochs: how long one is (τ) and what each link can do in epochs.

The rules are those of the :mod:`te_ccl.schedule` docstring (α delays arrival; the link is
busy only for ``chunk/b``). For a link with bandwidth ``b``, latency ``α`` and chunk size ``C``:

* occupancy ``k = ceil(C / (b·τ))`` epochs per chunk;
* delay ``d = ceil((C/b + α) / τ)``: a chunk started in epoch ``t`` is held at the far end
  from epoch ``t + d``;
* capacity ``cap = min(floor(b·τ / C), floor((d·τ − α)·b / C))`` chunk starts per epoch when
  ``b·τ ≥ C`` (the i-th chunk of an epoch leaves the link after ``i·C/b``, so only those
  that still arrive within ``d`` epochs may start together), else 1 per ``k`` epochs —
  both are "at most ``cap`` starts in any ``k`` consecutive epochs".

Ceilings and floors forgive a relative 1e-9 so that τ equal to a link's own chunk time
gives exactly one epoch despite rounding.

>>> from te_ccl.topology import Link
>>> lt = link_timing(Link("a", "b", 1e9, 1e-6), chunk_bytes=4000, epoch_s=2e-6)
>>> lt.occupancy, lt.capacity, lt.delay
(2, 1, 3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from te_ccl.errors import SpecError
from te_ccl.model.footprint import MAX_SPAN_S
from te_ccl.topology.model import Link, Topology

__all__ = ["EPOCH_POLICIES", "LinkTiming", "link_timing", "epoch_duration"]

EPOCH_POLICIES = ("fastest", "slowest")
MAX_SPREAD = 64  # the slowest link's chunk time in epochs, at most, under ``fastest``
_EPS = 1e-9


def ceil_tol(x: float) -> int:
    return math.ceil(x - _EPS * max(1.0, abs(x)))


def floor_tol(x: float) -> int:
    return math.floor(x + _EPS * max(1.0, abs(x)))


@dataclass(frozen=True)
class LinkTiming:
    """A link in epochs: ``capacity`` starts in any ``occupancy`` consecutive epochs, ``delay`` to arrive."""

    link: Link
    occupancy: int
    capacity: int
    delay: int

    @property
    def key(self) -> tuple[str, str]:
        return self.link.key

    @property
    def chunks_per_epoch(self) -> float:
        return self.capacity / self.occupancy


def link_timing(link: Link, chunk_bytes: float, epoch_s: float) -> LinkTiming:
    per_epoch = link.bandwidth_Bps * epoch_s / chunk_bytes
    delay = max(1, ceil_tol(link.transfer_time_s(chunk_bytes) / epoch_s))
    if per_epoch >= 1 - _EPS:
        # the i-th chunk of an epoch leaves the link after i·C/b: only those that still
        # arrive within ``delay`` epochs may start together
        in_time = (delay * epoch_s - link.latency_s) * link.bandwidth_Bps / chunk_bytes
        occupancy, capacity = 1, max(1, min(floor_tol(per_epoch), floor_tol(in_time)))
    else:
        occupancy, capacity = ceil_tol(1 / per_epoch), 1
    return LinkTiming(link, occupancy, capacity, delay)


def epoch_duration(topology: Topology, chunk_bytes: float, policy: str | float = "fastest") -> float:
    """τ in seconds: ``fastest``/``slowest`` link's ``C/b + α``, or a given number of seconds.

    ``fastest`` (default) lets the fastest link move one chunk per epoch, α included, but
    keeps τ at least 1/:data:`MAX_SPREAD` of the slowest link's chunk time: tiny chunks on
    links with and without latency (0 vs 2 µs for 1 byte) would otherwise need ~10⁵
    epochs per hop (no shipped topology spreads that far, so this never binds there);
    ``slowest`` makes every link carry at least one chunk per epoch (fewer epochs, coarser).

    >>> from te_ccl.topology import Link, Node, Topology
    >>> t = Topology.build("p", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 2e9)])
    >>> epoch_duration(t, 1000), epoch_duration(t, 1000, "slowest"), epoch_duration(t, 1000, 3e-6)
    (5e-07, 1e-06, 3e-06)
    """
    if not isinstance(policy, str):
        if not 0 < policy <= MAX_SPAN_S:
            raise SpecError(f"expected a positive epoch duration of at most {MAX_SPAN_S:g} s "
                            f"(a schedule's times are picoseconds in 64 bits), got {policy:g}",
                            key="epoch")
        return float(policy)
    times = [link.transfer_time_s(chunk_bytes) for link in topology.links]
    if not times:
        raise SpecError("the topology has no links", key="links")
    if policy == "fastest":
        return max(min(times), max(times) / MAX_SPREAD)
    if policy == "slowest":
        return max(times)
    raise SpecError(f"expected one of {', '.join(EPOCH_POLICIES)} or seconds, got {policy!r}",
                    key="epoch")
