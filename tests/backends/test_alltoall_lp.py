"""The LP backend's copy-free flows and GPU buffer limits: one commodity per destination
relays through a limited GPU that is only one of a chunk's destinations, so the LP would
count slots the schedule does not need and refuse; the backend hands such problems to
rounds."""

from __future__ import annotations

from te_ccl.backends.base import SolveParams
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler.solve import solve
from te_ccl.topology import Link, Node, Topology
from te_ccl.verify.schedule_check import check_schedule


def test_a_limited_gpu_among_the_destinations_goes_to_rounds() -> None:
    """A one-way ring of 4 GPUs, the last holding 4 relayed chunks: every AllGather chunk
    of g1 and g2 for g0 and g1 passes it, 6 commodities but 4 chunks it keeps anyway."""
    nodes = [Node(f"g{i}", has_buffer=False, buffer_bytes=4000 if i == 3 else None)
             for i in range(4)]
    ring = Topology.build("ring", nodes, [Link(f"g{i}", f"g{(i + 1) % 4}", 1e9)
                                          for i in range(4)])
    c = Collective(CollectiveKind.ALLGATHER, 8000, (0, 1, 2, 3), 2)
    s = solve(ring, c, SolveParams(backend="lp", time_limit_s=600))  # ends at once
    assert any("used rounds" in n for n in s.info.notes)
    assert check_schedule(s) == []
    assert s.finish_time_s >= lower_bound(ring, c).seconds * (1 - 1e-9)
