"""AlltoAll's ``window_s`` against the best schedules of small two-box fabrics: the flow
model's exact solve (``backend="milp"``, optimal within its epochs for the chunks given)
and the templates, each file replayed as the runtime runs it. No replay may finish before
the bound; on three fixed fabrics a file meets it (so that file is optimal), so a bound 5%
too high is caught by the same check."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import te_ccl
from te_ccl.bounds import alltoall_window
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.deadline import TimeLimitReached
from te_ccl.topology import Link, Node, NodeKind, Topology
from tests.bounds.test_alltoall_alpha import replayed
from tests.bounds.test_alltoall_window import _files

Spec = tuple[float, float]  # a link's (bandwidth B/s, α s)


def two_boxes(k: int, switch: bool, inside: tuple[Spec, ...], across: tuple[Spec, ...]
              ) -> Topology:
    """Two boxes of ``k`` GPUs, each a full mesh or a star on a switch without buffer
    (``inside``: one spec per link, in build order); joined by rails (GPU i to GPU i of
    the other box, two specs a rail) or, with switches and two ``across`` specs, by one
    switch-to-switch pair of links."""
    nodes = [Node(f"g{i}") for i in range(2 * k)]
    pairs: list[tuple[str, str]] = []
    for b in range(2):
        gpus = [f"g{b * k + i}" for i in range(k)]
        if switch:
            nodes.append(Node(f"sw{b}", NodeKind.SWITCH))
            pairs += [p for g in gpus for p in ((g, f"sw{b}"), (f"sw{b}", g))]
        else:
            pairs += [(g, h) for g in gpus for h in gpus if g != h]
    if switch and len(across) == 2:
        pairs += [("sw0", "sw1"), ("sw1", "sw0")]
    else:
        pairs += [p for i in range(k) for p in ((f"g{i}", f"g{k + i}"), (f"g{k + i}", f"g{i}"))]
    links = [Link(u, v, *s) for (u, v), s in zip(pairs, inside + across, strict=True)]
    return Topology.build("two-box", nodes, links)


def uniform(k: int, switch: bool, inside: Spec, across: Spec, uplink: bool = False
            ) -> Topology:
    """:func:`two_boxes` with one spec for every link inside and one for every link across."""
    n_in = 4 * k if switch else 2 * k * (k - 1)
    return two_boxes(k, switch, (inside,) * n_in, (across,) * (2 if uplink else 2 * k))


@lru_cache(maxsize=64)
def best_replay(topo: Topology, chunk: int, chunkings: tuple[int, ...]) -> float:
    """The fastest replay of the templates' files and the exact solve's (per chunking;
    a solve not done in its time limit is left out)."""
    c = Collective(CollectiveKind.ALLTOALL, topo.ngpus * chunk, tuple(range(topo.ngpus)))
    replays = _files(topo, c)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "a2a.xml"
        for chunks in chunkings:
            try:
                te_ccl.compile(topo, c, backend="milp", chunks=chunks, time_limit_s=20,
                               output=out)
            except TimeLimitReached:
                continue
            replays.append(replayed(topo, c, out.read_bytes()))
    return min(replays)


def window(topo: Topology, chunk: int) -> float:
    """``window_s`` for an AlltoAll of every GPU, ``chunk`` bytes a pair."""
    return alltoall_window(topo, topo.gpus, float(chunk))[0]


# (fabric, bytes per pair, chunks a rank solved): met by a file (0, 1, 4), the largest
# bound of the fabric (2 to 5), equal to cut_alpha_s (0, 1)
FIXED = [
    (uniform(2, False, (1e10, 0.0), (2e9, 2e-6)), 8000, (1,)),
    (uniform(3, False, (4e9, 0.0), (2e9, 1e-7)), 2000, (1,)),
    (uniform(2, True, (1e10, 1e-6), (1e9, 2e-6)), 500, (1, 2)),
    (uniform(2, True, (1e10, 2e-6), (2e9, 1e-6)), 2000, (1, 2)),
    (uniform(2, True, (4e9, 5e-7), (1e9, 1e-6), uplink=True), 1000, (1,)),
    (uniform(2, False, (4e9, 1e-6), (1e9, 1e-7)), 500, (1, 2)),
]


def holds(bound, topo: Topology, chunk: int, chunkings: tuple[int, ...]) -> bool:
    """Does ``bound`` stay at or below the best file's replay?"""
    return bound(topo, chunk) <= best_replay(topo, chunk, chunkings) * (1 + 1e-9)


@pytest.mark.parametrize(("topo", "chunk", "chunkings"), FIXED)
def test_no_best_file_replays_below_it(topo: Topology, chunk: int,
                                       chunkings: tuple[int, ...]) -> None:
    assert window(topo, chunk) > 0
    assert holds(window, topo, chunk, chunkings)


def test_a_bound_five_percent_high_is_caught() -> None:
    assert not all(holds(lambda t, x: 1.05 * window(t, x), *case) for case in FIXED)


BANDWIDTH_IN, BANDWIDTH_ACROSS = st.sampled_from([4e9, 1e10]), st.sampled_from([1e9, 2e9])
LATENCY = st.sampled_from([0.0, 1e-7, 5e-7, 1e-6, 2e-6])


@st.composite
def random_two_boxes(draw) -> Topology:
    """:func:`two_boxes` with every link's bandwidth and α drawn apart (the links across
    slower than those inside, so the boxes are the bound's groups)."""
    k, switch = draw(st.integers(2, 3)), draw(st.booleans())
    uplink = switch and draw(st.booleans())
    n_in = 4 * k if switch else 2 * k * (k - 1)
    inside = tuple((draw(BANDWIDTH_IN), draw(LATENCY)) for _ in range(n_in))
    across = tuple((draw(BANDWIDTH_ACROSS), draw(LATENCY)) for _ in range(2 if uplink else 2 * k))
    return two_boxes(k, switch, inside, across)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_two_boxes(), st.sampled_from([500, 2000, 8000]))
def test_no_best_file_replays_below_it_on_random_two_box_fabrics(topo: Topology,
                                                                 chunk: int) -> None:
    assert holds(window, topo, chunk, (1, 2) if topo.ngpus == 4 else (1,))  # 6: too slow
