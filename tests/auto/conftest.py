"""Fixtures of the portfolio's tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import te_ccl.baselines
import te_ccl.compiler.candidates as candidates
from te_ccl.errors import SolverError
from te_ccl.spec.topology import load_topology
from te_ccl.topology.model import Topology

BOXES = """\
name: boxes2x2
generator:
  kind: boxes
  count: 2
  box: {kind: star, n: 2, bandwidth: 450GB/s, latency: 0.7us, switch: {nvls: true}}
  join: {kind: rails, nodes: [g0, g1], bandwidth: 400Gbps, latency: 1.3us}
"""


@pytest.fixture(scope="module")
def boxes(tmp_path_factory) -> Topology:
    """Two boxes of two GPUs on an NVLS switch, joined by rails: the box plan's fabric."""
    path = tmp_path_factory.mktemp("boxes") / "boxes2x2.yaml"
    path.write_text(BOXES)
    return load_topology(str(path))


@pytest.fixture
def spied(monkeypatch) -> Callable[..., list[str]]:
    """``spied(give_up=())``: the list the race's template builds and solver runs are named
    in, in order (a solver by its ``params.backend``); a backend of ``give_up`` fails at
    once, so the order does not depend on how long it would take."""

    def spy(give_up: tuple[str, ...] = ()) -> list[str]:
        calls: list[str] = []
        build, run = te_ccl.baselines.build_baseline, candidates.run_strategy

        def spy_build(name, *args):
            calls.append(name)
            return build(name, *args)

        def spy_run(topo, coll, params, progress=None):
            calls.append(params.backend)
            if params.backend in give_up:
                raise SolverError("time limit reached without a solution")
            return run(topo, coll, params, progress)

        monkeypatch.setattr(te_ccl.baselines, "build_baseline", spy_build)
        monkeypatch.setattr(candidates, "run_strategy", spy_run)
        return calls

    return spy
