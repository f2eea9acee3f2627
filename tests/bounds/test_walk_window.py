"""AlltoAll's ``walk_window_s`` against the best files of small fabrics: the flow model's
exact solve (``backend="milp"``) and the templates, each file replayed as the runtime
runs it. No replay may finish before the bound; on one fixed fabric a file meets it
(so that file is optimal), so a bound 5% too high is caught by the same check. On dgx1
it is the bound of a 64 KB AlltoAll, above every other part."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.bounds import WALK_PATHS, alltoall_walk_window, lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.spec.topology import load_topology
from te_ccl.topology import Link, Node, NodeKind, Topology
from tests.bounds.strategies import fabrics
from tests.bounds.test_alltoall_alpha import template_replays
from tests.bounds.test_window_exact import best_replay

Spec = tuple[int, int, float, float]  # a link both ways: (GPU, GPU, bandwidth B/s, α s)


def fabric(specs: tuple[Spec, ...]) -> Topology:
    """GPUs ``g0``… joined by ``specs``' links, each both ways."""
    n = 1 + max(max(i, j) for i, j, _, _ in specs)
    links = [link for i, j, b, a in specs
             for link in (Link(f"g{i}", f"g{j}", b, a), Link(f"g{j}", f"g{i}", b, a))]
    return Topology.build("fabric", [Node(f"g{i}") for i in range(n)], links)


def walk(topo: Topology, chunk: int) -> float:
    return alltoall_walk_window(topo, topo.gpus, float(chunk))


# (fabric, bytes per pair): the first met by a file, every one above the other parts
FIXED = [
    (fabric(((0, 1, 4e9, 5e-7), (0, 2, 1e9, 2e-6), (1, 3, 2e9, 5e-7), (2, 3, 1e9, 1e-6))), 1000),
    (fabric(((0, 1, 4e9, 1e-6), (0, 2, 4e9, 1e-6), (1, 3, 1e9, 1e-6), (2, 3, 4e9, 2e-6))), 2000),
    (fabric(((0, 2, 4e9, 1e-6), (0, 3, 1e9, 5e-7), (1, 3, 4e9, 2e-6), (2, 3, 1e9, 1e-6))), 500),
    (fabric(((0, 1, 4e9, 1e-6), (0, 4, 4e9, 2e-6), (1, 3, 1e9, 1e-6), (1, 4, 2e9, 5e-7),
             (2, 3, 4e9, 2e-6), (3, 4, 2e9, 1e-6))), 500),
]


def holds(bound, topo: Topology, chunk: int) -> bool:
    """Does ``bound`` stay at or below the best file's replay (one and two chunks)?"""
    return bound(topo, chunk) <= best_replay(topo, chunk, (1, 2)) * (1 + 1e-9)


@pytest.mark.parametrize(("topo", "chunk"), FIXED)
def test_no_best_file_replays_below_it(topo: Topology, chunk: int) -> None:
    c = Collective(CollectiveKind.ALLTOALL, topo.ngpus * chunk, tuple(range(topo.ngpus)))
    others = {k: v for k, v in lower_bound(topo, c).parts.items() if k != "walk_window_s"}
    assert walk(topo, chunk) > max(others.values())
    assert holds(walk, topo, chunk)


def test_a_bound_five_percent_high_is_caught() -> None:
    assert not holds(lambda t, x: 1.05 * walk(t, x), *FIXED[0])


def test_it_sets_dgx1_bound_at_64kb_and_no_template_beats_it() -> None:
    dgx1 = load_topology("dgx1")
    c = Collective(CollectiveKind.ALLTOALL, 64_000, tuple(range(8)))
    bound = lower_bound(dgx1, c)
    assert bound.argument == "walk_window_s"
    assert bound.seconds == pytest.approx(1.72e-6, rel=1e-3)
    for seconds in template_replays(dgx1, c, ("direct", "far-first")):
        assert seconds >= bound.seconds


def test_none_where_bandwidth_dominates() -> None:
    dgx1 = load_topology("dgx1")
    assert walk(dgx1, 10**8) == 0.0


class _Walked(Topology):
    """A topology that counts the nodes whose links are read and refuses one too many."""

    def out_links(self, name: str) -> list[Link]:
        self.meta["read"] = self.meta.get("read", 0) + 1
        assert self.meta["read"] <= WALK_PATHS + 2, "the route search walked on"
        return super().out_links(name)


def test_few_members_far_apart_in_a_large_fabric_are_given_up() -> None:
    # two GPUs at opposite corners of a 12x12 switch mesh: millions of short paths reach
    # neither, so the part is left out after a bounded walk, not searched to the end
    n = 12
    pairs = [("g0", "s0_0"), ("g1", f"s{n - 1}_{n - 1}")]
    for i in range(n):
        for j in range(n):
            pairs += [(f"s{i}_{j}", f"s{x}_{y}") for x, y in ((i + 1, j), (i, j + 1))
                      if x < n and y < n]
    links = [Link(a, b, 1e11, 5e-7) for u, v in pairs for a, b in ((u, v), (v, u))]
    nodes = [Node("g0"), Node("g1")] + [Node(f"s{i}_{j}", NodeKind.SWITCH, has_buffer=True)
                                        for i in range(n) for j in range(n)]
    topo = _Walked.build("switch-mesh", nodes, links)
    assert alltoall_walk_window(topo, ["g0", "g1"], 1000.0) == 0.0


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(max_gpus=4, switch=False), st.sampled_from([500, 2000]))
def test_no_best_file_replays_below_it_on_random_fabrics(topo: Topology, chunk: int) -> None:
    assert holds(walk, topo, chunk)
