"""The AlltoAll concurrent-flow LP by symmetry: one source and a row per link orbit give
the same T as the full LP, and topologies without the symmetry take the full LP."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import te_ccl.bounds as bounds
from te_ccl.bounds import alltoall_time
from te_ccl.topology.generators import mesh, ring, torus
from te_ccl.topology.model import Topology


def _per_dimension(t: Topology) -> Topology:
    """``t`` (a generated torus) with the links of axis ``a`` at ``(1 + 2a)`` times the bandwidth."""
    dims = t.meta["dims"]

    def axis(src: str, dst: str) -> int:
        a, b = (np.unravel_index(t.gpus.index(x), dims) for x in (src, dst))
        return next(i for i in range(len(dims)) if a[i] != b[i])

    return replace(t, links=[replace(k, bandwidth_Bps=k.bandwidth_Bps * (1 + 2 * axis(k.src, k.dst)))
                             for k in t.links])


def _full(t: Topology, monkeypatch: pytest.MonkeyPatch) -> float | None:
    with monkeypatch.context() as m:
        m.setattr(bounds, "_link_orbits", lambda *_: None)
        return alltoall_time(t, list(t.gpus), 1e6)


@pytest.mark.parametrize("t", [torus([3, 3], 1e9), torus([3, 5], 1e9), torus([6], 1e9),
                               torus([3, 3, 3], 5e10),
                               pytest.param(torus([4, 4, 4], 5e10), marks=pytest.mark.slow),
                               pytest.param(torus([8, 8], 1e9), marks=pytest.mark.slow),
                               _per_dimension(torus([3, 5], 1e9)),
                               _per_dimension(torus([4, 3, 3], 1e9))],
                         ids=lambda t: t.name + ("-per-dim" if len({k.bandwidth_Bps for k in t.links}) > 1 else ""))
def test_orbit_lp_equals_the_full_lp(t: Topology, monkeypatch: pytest.MonkeyPatch) -> None:
    orbits = bounds._link_orbits(t, list(t.gpus))
    assert orbits is not None and sum(orbits[1]) == len(t.links)
    assert alltoall_time(t, list(t.gpus), 1e6) == pytest.approx(_full(t, monkeypatch), rel=1e-9)


def _skewed(t: Topology) -> Topology:
    """One link of ``t`` at twice the bandwidth: no translation keeps the links."""
    return replace(t, links=[replace(t.links[0], bandwidth_Bps=2 * t.links[0].bandwidth_Bps),
                             *t.links[1:]])


@pytest.mark.parametrize("t", [mesh([3, 3], 1e9), ring(5, 1e9), _skewed(torus([3, 4], 1e9))],
                         ids=["mesh", "ring", "skewed-torus"])
def test_without_the_symmetry_the_full_lp(t: Topology, monkeypatch: pytest.MonkeyPatch) -> None:
    assert bounds._link_orbits(t, list(t.gpus)) is None
    assert alltoall_time(t, list(t.gpus), 1e6) == _full(t, monkeypatch)


def test_members_a_subset_take_the_full_lp() -> None:
    t = torus([3, 3], 1e9)
    assert bounds._link_orbits(t, list(t.gpus[:4])) is None
