"""The schedule checker's array passes find the same violations, in the same order, as
the per-transfer checker they replaced (:mod:`.schedule_check_reference`), on correct
schedules of many collectives and topologies and on random edits of them."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology.generators import SwitchCaps, mesh, ring, star, torus
from te_ccl.topology.model import Topology
from te_ccl.verify.schedule_check import check_schedule

from .schedule_check_reference import check_schedule as reference

_K = CollectiveKind
_TOPOLOGIES = {
    "ring5": lambda: ring(5, 1e9, 1e-7),
    "mesh3x3": lambda: mesh([3, 3], 1e9),
    "torus3x4": lambda: torus([3, 4], 1e9, 5e-7),
    "star4": lambda: star(4, 1e9),
    "star4-reduce": lambda: star(4, 1e9, switch=SwitchCaps(copy=False, reduce=True)),
    "star4-buffer": lambda: star(4, 1e9, switch=SwitchCaps(copy=False, buffer=True)),
    "star4-nocopy": lambda: star(4, 1e9, switch=SwitchCaps(copy=False)),
    "mesh3x3-buffers": lambda: _buffers(mesh([3, 3], 1e9), 3000),
}


def _buffers(topo: Topology, limit: int) -> Topology:
    """``topo`` with a relay buffer of ``limit`` bytes at every GPU."""
    return Topology.build(f"{topo.name}-buffers", [replace(n, buffer_bytes=limit)
                                                   for n in topo.nodes], list(topo.links))
_KINDS = [_K.ALLGATHER, _K.REDUCESCATTER, _K.ALLREDUCE, _K.REDUCE, _K.BROADCAST, _K.ALLTOALL]


@cache
def _corpus() -> tuple[Schedule, ...]:
    out = []
    for make in _TOPOLOGIES.values():
        topo = make()
        for kind in _KINDS:
            root = 0 if kind in (_K.REDUCE, _K.BROADCAST) else None
            coll = Collective(kind, 3000 * topo.ngpus, tuple(range(topo.ngpus)), root=root)
            for name in applicable(topo, coll)[:3]:
                try:
                    out.append(build_baseline(name, topo, coll))
                except BaselineError:
                    continue
    return tuple(out)


def _same(s: Schedule) -> None:
    assert [(v.rule, v.message) for v in check_schedule(s)] == \
        [(v.rule, v.message) for v in reference(s)]


def test_the_corpus_is_checked_alike():
    assert len(_corpus()) > 40
    for s in _corpus():
        _same(s)


@st.composite
def _edited(draw) -> Schedule:
    s = draw(st.sampled_from(_corpus()))
    ts = list(s.transfers)
    names = [n.name for n in s.topology.nodes] + ["nowhere"]
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(ts) - 1))
        t = ts[i]
        how = draw(st.integers(0, 7))
        if how == 0:
            del ts[i]
        elif how == 1:
            ts.insert(draw(st.integers(0, len(ts))), t)
        elif how == 2:
            d = draw(st.integers(-2, 2))
            ts[i] = replace(t, start_epoch=t.start_epoch + d, arrive_epoch=t.arrive_epoch + d)
        elif how == 3:
            ts[i] = replace(t, arrive_epoch=t.arrive_epoch + draw(st.integers(-12, 1)))
        elif how == 4:
            ts[i] = replace(t, op=draw(st.sampled_from(["copy", "reduce", "sum"])))
        elif how == 5:
            ts[i] = replace(t, chunk=t.chunk + draw(st.integers(-1, 1)))
        elif how == 6:
            ts[i] = replace(t, src=draw(st.sampled_from(names)), dst=draw(st.sampled_from(names)))
        else:
            j = draw(st.integers(0, len(ts) - 1))
            ts[i], ts[j] = ts[j], ts[i]
        if not ts:
            break
    scale = draw(st.sampled_from([1.0, 1.0, 0.3, 0.5, 2.5]))  # < 1: links slower than an epoch
    return replace(s, transfers=tuple(ts), epoch_s=s.epoch_s * scale)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_edited())
def test_random_edits_are_checked_alike(s: Schedule) -> None:
    _same(s)


@pytest.mark.parametrize("transfers", [(), (Transfer(0, "g0", "g1", 0, 1),) * 3])
def test_empty_and_repeated_transfers_are_checked_alike(transfers):
    topo = ring(3, 1e9)
    _same(Schedule(topo, Collective(_K.ALLGATHER, 3000, (0, 1, 2)), 1e-6, transfers))


def test_arrivals_before_their_start_are_ordered_as_before():
    """Negative arrival epochs sort below the others in a link's epoch (keys merged for
    one sort are shifted to start at 0)."""
    topo = ring(3, 1e9)
    ts = (Transfer(0, "g0", "g1", 0, 1), Transfer(2, "g0", "g1", 1, -9),
          Transfer(1, "g0", "g1", 0, 1), Transfer(1, "g1", "g2", 0, 9))
    _same(Schedule(topo, Collective(_K.ALLGATHER, 3000, (0, 1, 2)), 1e-6, ts))
