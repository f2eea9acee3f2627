"""Lowering tests: hand-built topologies and schedules (no solver needed), the ``kit`` fixture
exposing them, and ``--update-golden`` (or UPDATE_GOLDEN=1) to rewrite golden files.

Run ``pytest tests/lower --update-golden``; with ``--import-mode=importlib`` test modules
cannot import a sibling helper module, hence the fixture.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

import pytest

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.msccl.verify import verify_msccl


def assert_verifies(xml: bytes, root: int | None = None) -> None:
    """The independent verifier (parser rules, symbolic execution, final buffers) accepts it,
    with each connection holding as many sends as the file's protocol allows."""
    report = verify_msccl(xml.decode(), root=root)
    assert report.valid, [f"{f.rule}: {f.message}" for f in report.errors][:5]


def ring(n: int, both: bool = True) -> Topology:
    links = [Link(f"g{i}", f"g{(i + 1) % n}", 1e9) for i in range(n)]
    if both:
        links += [Link(f"g{(i + 1) % n}", f"g{i}", 1e9) for i in range(n)]
    return Topology.build(f"ring{n}", [Node(f"g{i}") for i in range(n)], links)


def full(n: int) -> Topology:
    links = [Link(f"g{i}", f"g{j}", 1e9) for i in range(n) for j in range(n) if i != j]
    return Topology.build(f"fc{n}", [Node(f"g{i}") for i in range(n)], links)


def star(n: int, can_reduce: bool = False) -> Topology:
    sw = Node("sw", NodeKind.SWITCH, can_reduce=can_reduce)
    links = [Link(f"g{i}", "sw", 1e9) for i in range(n)] + [Link("sw", f"g{i}", 1e9) for i in range(n)]
    return Topology.build(f"star{n}", [Node(f"g{i}") for i in range(n)] + [sw], links)


def coll(kind: str, n: int, *, chunks: int = 1, inplace: bool = False, root: int | None = None,
         ranks: tuple[int, ...] | None = None) -> Collective:
    ranks = ranks or tuple(range(n))
    k = CollectiveKind(kind)
    return Collective(k, 1024 * len(ranks) * chunks, ranks, chunks, root, inplace)


def ring_allgather(n: int, inplace: bool = False) -> Schedule:
    """Chunk p travels p → p+1 → … one hop per epoch."""
    tr = [Transfer(p, f"g{(p + h) % n}", f"g{(p + h + 1) % n}", h, h + 1)
          for p in range(n) for h in range(n - 1)]
    return Schedule(ring(n, both=False), coll("allgather", n, inplace=inplace), 1e-6, tuple(tr))


def ring_reducescatter(n: int, inplace: bool = False) -> Schedule:
    """Partials of chunk p flow p+1 → p+2 → … → p, each hop adding (op=reduce)."""
    tr = [Transfer(p, f"g{(p + 1 + h) % n}", f"g{(p + 2 + h) % n}", h, h + 1, "reduce")
          for p in range(n) for h in range(n - 1)]
    return Schedule(ring(n, both=False), coll("reducescatter", n, inplace=inplace), 1e-6, tuple(tr))


def ring_allreduce(n: int, inplace: bool = False) -> Schedule:
    """Ring ReduceScatter then ring AllGather of the sums (copy ops) on the same chunks."""
    rs = ring_reducescatter(n).transfers
    ag = [Transfer(p, f"g{(p + h) % n}", f"g{(p + h + 1) % n}", n - 1 + h, n + h)
          for p in range(n) for h in range(n - 1)]
    return Schedule(ring(n, both=False), coll("allreduce", n, inplace=inplace), 1e-6,
                    tuple(rs) + tuple(ag))


def direct(topology: Topology, collective: Collective) -> Schedule:
    """Every source sends each chunk straight to every destination in epoch 0."""
    tr = []
    for ch in collective.chunks():
        op = "reduce" if ch.reduce else "copy"
        for s in ch.sources:
            for d in ch.destinations:
                if s != d:
                    tr.append(Transfer(ch.id, topology.gpu(s), topology.gpu(d), 0, 1, op))
    return Schedule(topology, collective, 1e-6, tuple(tr))


def star_allgather(n: int) -> Schedule:
    """Each GPU sends its chunk to the switch, which copies it to every other GPU."""
    tr = [Transfer(p, f"g{p}", "sw", 0, 1) for p in range(n)]
    tr += [Transfer(p, "sw", f"g{q}", 1, 2) for p in range(n) for q in range(n) if q != p]
    return Schedule(star(n), coll("allgather", n), 1e-6, tuple(tr))


class ChannelPass(NamedTuple):
    """The arguments of one run of the lowering's channel pass."""

    budget: int
    sends_waited: bool
    depth: int
    favour: frozenset[int]
    timed: bool


@pytest.fixture
def channel_passes(monkeypatch: pytest.MonkeyPatch) -> list[ChannelPass]:
    """Every run of the lowering's channel pass from here on, in order."""
    import te_ccl.lower.msccl.parallel as parallel

    runs: list[ChannelPass] = []
    real = parallel.assign_channels

    def recorded(edges, fusions, budget, sends_waited, depth, favour=frozenset(),
                 timed=True, **rest):
        runs.append(ChannelPass(budget, sends_waited, depth, favour, timed))
        return real(edges, fusions, budget, sends_waited, depth, favour, timed, **rest)

    monkeypatch.setattr(parallel, "assign_channels", recorded)
    return runs


@pytest.fixture
def kit():
    """This module: the schedule builders and ``assert_verifies``."""
    return sys.modules[__name__]


def pytest_addoption(parser: pytest.Parser) -> None:
    try:
        parser.addoption("--update-golden", action="store_true", default=False,
                         help="rewrite tests/golden/ files from the current output")
    except ValueError:  # already registered by another conftest
        pass


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    try:
        flag = bool(request.config.getoption("--update-golden"))
    except ValueError:
        flag = False
    return flag or os.environ.get("UPDATE_GOLDEN") == "1"
