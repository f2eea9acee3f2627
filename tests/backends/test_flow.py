"""The flow model as a candidate: (topology, collective, params) -> Schedule."""

from __future__ import annotations

import pytest

from te_ccl.backends.base import SolveParams
from te_ccl.backends.flow import solve_flow
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.topology import Link, Node, Topology
from te_ccl.verify.schedule_check import check_schedule


def ring(n: int) -> Topology:
    links = [Link(f"g{i}", f"g{(i + d) % n}", 1e9, 1e-6) for i in range(n) for d in (1, n - 1)]
    return Topology.build(f"ring{n}", [Node(f"g{i}") for i in range(n)], links)


@pytest.mark.parametrize("kind", [CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                                  CollectiveKind.ALLREDUCE])
def test_the_flow_model_returns_a_checked_schedule_of_its_input(kind):
    topo, coll = ring(4), Collective(kind, 4 << 20, (0, 1, 2, 3))
    s = solve_flow(topo, coll, SolveParams(time_limit_s=10, threads=1))
    assert (s.topology, s.collective) == (topo, coll)
    assert check_schedule(s) == [] and s.info.backend


def test_a_compile_asks_once_whether_msccl_can_express_the_fabric(monkeypatch, tmp_path):
    import te_ccl
    import te_ccl.compiler.pipeline as pipeline
    import te_ccl.compiler.render as render
    from te_ccl.lower.msccl import check_expressible

    asked = []

    def counting(fmt: str, topology: Topology) -> None:
        asked.append(topology.name)
        check_expressible(fmt, topology)

    for module in (pipeline, render):  # where a compile asks it
        monkeypatch.setattr(module, "check_expressible", counting)
    te_ccl.compile(ring(4), "allgather", size="1MB", output=tmp_path / "ring4.xml",
                   time_limit_s=20)
    assert asked == ["ring4"]
