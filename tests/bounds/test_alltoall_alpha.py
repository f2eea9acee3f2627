"""AlltoAll's ``cut_alpha_s`` (a cut's bytes over its bandwidth plus the α tail after
it): no verified MSCCL file replays below it — templates and compiled files on random
fabrics — and a wrong variant (the tail counted twice) is caught by the same check."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from te_ccl import bounds
from te_ccl.baselines import BaselineError, build_baseline
from te_ccl.bounds import alltoall_cut_alpha, lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.msccl.verify import verify_msccl
from tests.bounds.fluid import fluid_optimum
from tests.bounds.strategies import collectives, fabrics


def replayed(topo: Topology, c: Collective, xml: bytes) -> float:
    """The verified file's replay, as the runtime runs it."""
    text = xml.decode()
    assert verify_msccl(text).valid
    return simulate_msccl(text, topo, c.size_bytes, ranks=c.ranks).finish_time_s


def template_replays(topo: Topology, c: Collective,
                     names: tuple[str, ...] = ("direct", "ring")) -> list[float]:
    """The replays of the named templates' verified files (those that build here)."""
    out = []
    for name in names:
        try:
            schedule = build_baseline(name, topo, c)
        except BaselineError:
            continue
        out.append(replayed(topo, c, lower_to_msccl(schedule)))
    return out


def cut_alpha(topo: Topology, c: Collective) -> float:
    members = [topo.gpu(r) for r in c.ranks]
    return alltoall_cut_alpha(topo, members, c.size_bytes / c.nranks)[0]


def every_gpu(topo: Topology, chunk: int) -> Collective:
    """AlltoAll of every GPU (the random fabrics' ring joins them all without relaying
    through a GPU outside the ranks, which the runtime cannot)."""
    return Collective(CollectiveKind.ALLTOALL, topo.ngpus * chunk, tuple(range(topo.ngpus)))


SMALL = st.sampled_from([1_000, 8_000, 125_000])  # bytes per chunk: α and β both matter


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(), SMALL)
def test_no_template_file_replays_below_the_cut_alpha_bound(topo, chunk):
    c = every_gpu(topo, chunk)
    bound, replays = cut_alpha(topo, c), template_replays(topo, c)
    assume(replays)
    for seconds in replays:
        assert seconds >= bound * (1 - 1e-9)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(max_gpus=4), SMALL)
def test_no_compiled_file_replays_below_the_bound(tmp_path_factory, topo, chunk):
    import te_ccl

    assume(not topo.reducing_switches)  # MSCCL XML cannot express a switch's sums
    c = every_gpu(topo, chunk)
    out = tmp_path_factory.mktemp("a2a") / "a2a.xml"
    result = te_ccl.compile(topo, c, time_limit_s=2, output=out)
    seconds = replayed(topo, c, out.read_bytes())
    assert seconds >= lower_bound(topo, c).seconds * (1 - 1e-9)
    assert result.finish_time_s >= lower_bound(topo, c).seconds * (1 - 1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(), st.data())
def test_its_bandwidth_part_stays_below_the_fluid_optimum(topo, data):
    """Rescaled to a large size, the part is its bandwidth term: a cut's, never above the
    fluid optimum."""
    c = data.draw(collectives(topo, ["alltoall"]))
    members = [topo.gpu(r) for r in c.ranks]
    value, tail = alltoall_cut_alpha(topo, members, c.size_bytes / c.nranks)
    assert value - tail <= fluid_optimum(topo, c) * (1 + 1e-9)


def pair(latency: float) -> Topology:
    return Topology.build("pair", [Node("a"), Node("b")],
                          [Link("a", "b", 1e9, latency), Link("b", "a", 1e9, latency)])


def test_the_direct_file_on_a_pair_meets_it():
    """1 µs on the link, then its α of 1 µs: the direct file takes exactly that."""
    topo, c = pair(1e-6), Collective(CollectiveKind.ALLTOALL, 2000, (0, 1))
    assert cut_alpha(topo, c) == pytest.approx(2e-6)
    assert template_replays(topo, c)[0] == pytest.approx(2e-6)


def test_the_tail_counted_twice_is_caught(monkeypatch):
    """A planted wrong variant (the α tail added twice) rises above a real file's replay:
    the checks above can fail."""
    topo, c = pair(1e-6), Collective(CollectiveKind.ALLTOALL, 2000, (0, 1))
    nearest = bounds.alpha_nearest
    monkeypatch.setattr(bounds, "alpha_nearest", lambda *a: 2 * nearest(*a))
    assert min(template_replays(topo, c)) < cut_alpha(topo, c) * (1 - 1e-9)


def test_a_box_with_its_switch_sets_the_tail():
    """Two boxes of two GPUs on a switch each, joined by one slow link each way: the cut
    around a box and its switch, then the far switch's α to its GPUs."""
    nodes = [Node(g) for g in ("a0", "a1", "b0", "b1")] + [
        Node(s, NodeKind.SWITCH) for s in ("sa", "sb")]
    links = []
    for box in ("a", "b"):
        for g in ("0", "1"):
            links += [Link(box + g, "s" + box, 1e11, 1e-7), Link("s" + box, box + g, 1e11, 1e-7)]
    links += [Link("sa", "sb", 1e9, 2e-6), Link("sb", "sa", 1e9, 2e-6)]
    topo = Topology.build("boxes", nodes, links)
    c = Collective(CollectiveKind.ALLTOALL, 4000, (0, 1, 2, 3))
    # 2·2 pairs of 1000 B over 1 GB/s, then 2 µs on the slow link and 0.1 µs to a GPU
    assert cut_alpha(topo, c) == pytest.approx(4e-6 + 2.1e-6)
    b = lower_bound(topo, c)
    assert b.fixed["cut_alpha_s"] == pytest.approx(2.1e-6)
    # window_s also counts the 0.1 µs before the slow link: no byte reaches sa earlier
    assert b.argument == "window_s" and b.seconds == pytest.approx(6.2e-6)


def test_the_farthest_members_bytes_alone_set_the_tail_where_latency_dominates():
    """mesh 4×4 AlltoAll of 64 KB: g0's 4 KB for g15 leave over its two 50 GB/s links
    (40 ns) before 6 hops of 0.5 µs: 3.04 µs, above the α-distance's 3 µs (all of g0's
    60 KB would leave by 0.6 µs, but g1 is one hop away); the templates' files stay
    above it."""
    from te_ccl.spec.topology import load_topology

    topo = load_topology("mesh4x4")
    c = Collective(CollectiveKind.ALLTOALL, 64_000, tuple(range(16)))
    assert cut_alpha(topo, c) == pytest.approx(3.04e-6)
    assert lower_bound(topo, c).fixed["cut_alpha_s"] == pytest.approx(3e-6)
    assert min(template_replays(topo, c)) >= 3.04e-6
