"""Compiling again from a previous file (``--from``): reading it, mapping its routes onto
a changed topology, and the bad input refused."""

from __future__ import annotations

from dataclasses import replace

import pytest

import te_ccl
from te_ccl.backends.base import SolveParams
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import forward_only
from te_ccl.compiler.incumbent import Incumbent
from te_ccl.compiler.warm import QUALITY_GAP, Previous, read_previous, repair, warm_schedule
from te_ccl.errors import SpecError
from te_ccl.simulate.replay import replay_finish
from te_ccl.spec.topology import load_topology
from te_ccl.topology.edit import TopologyEdit, edit_topology
from te_ccl.topology.generators import ring
from te_ccl.topology.model import Node, Topology
from te_ccl.verify.schedule_check import check_schedule

SIZE = 1 << 20


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> str:
    """An AllGather on ring8, compiled once for the module."""
    path = tmp_path_factory.mktemp("warm") / "ring8.xml"
    te_ccl.compile("ring8", "allgather", size=SIZE, output=str(path), time_limit_s=20)
    return str(path)


def _allgather(topology, **kw) -> Collective:
    return Collective(CollectiveKind.ALLGATHER, SIZE, tuple(range(topology.ngpus)), **kw)


def test_the_file_gives_one_tree_per_chunk_reaching_every_other_rank(previous):
    topo = load_topology("ring8")
    c = _allgather(topo)
    p = read_previous(previous, c, topo, routes=True)
    assert p.trees is not None and len(p.trees) == c.nranks * p.pieces
    for _, owner, tree in p.trees:
        assert sorted(r for r, _ in tree) == [r for r in range(c.nranks) if r != owner]


def test_routes_over_a_removed_link_are_rerouted(previous):
    topo = edit_topology(load_topology("ring8"), TopologyEdit(without_links=("g0>g1",)))
    c = _allgather(topo)
    p = read_previous(previous, c, topo, routes=True)
    s = warm_schedule(replace(p), forward_only(topo), c)
    if s is None:  # the re-timed trees landed too far from the bound to be a first file
        pytest.skip("routes not within the first file's gap on this topology")
    assert check_schedule(s) == []
    assert not any((t.src, t.dst) == ("g0", "g1") for t in s.transfers)
    pieces = s.info.subchunks * s.collective.chunks_per_rank
    assert p.pieces % pieces == 0
    if pieces < p.pieces:  # cut coarser only where it stays near the bound
        bound = lower_bound(topo, c).seconds
        assert replay_finish(s) <= bound * (1 + QUALITY_GAP)


def test_reductions_seed_nothing_and_say_why(tmp_path):
    topo = ring(4, 25e9, 0.7e-6)
    coll = Collective(CollectiveKind.ALLREDUCE, SIZE, tuple(range(4)))
    path = tmp_path / "ar.xml"
    te_ccl.compile(topo, coll, output=str(path), time_limit_s=20)
    p = read_previous(str(path), coll, topo, routes=True)
    assert p.trees is None and "allreduce" in p.why
    assert warm_schedule(p, topo, coll) is None


def test_with_a_gpu_gone_the_routes_go_around_it(previous):
    topo = edit_topology(load_topology("ring8"), TopologyEdit(without_gpus=("g3",)))
    c = _allgather(topo)
    p = read_previous(previous, c, topo, routes=True)
    assert p.trees is not None and len(p.trees) == 7 * p.pieces
    for _, owner, tree in p.trees:
        assert sorted(r for r, _ in tree) == [r for r in range(7) if r != owner]
    s = warm_schedule(p, topo, c)
    assert s is not None and check_schedule(s) == []


def test_a_file_of_fewer_ranks_or_without_provenance_is_refused(previous, tmp_path):
    torus = load_topology("torus4x4")
    with pytest.raises(SpecError, match="compiled for ring8, which has no link"):
        read_previous(previous, _allgather(torus), torus)
    bigger = Topology.build("ring8", tuple(Node(f"g{i}") for i in range(9)),
                            load_topology("ring8").links)  # ring8's links and a ninth GPU
    with pytest.raises(SpecError, match="ngpus=8, the collective compiled ngpus=9"):
        read_previous(previous, _allgather(bigger), bigger)
    bare = tmp_path / "bare.xml"
    bare.write_text("".join(line for line in open(previous) if "teccl:" not in line))
    seven = edit_topology(load_topology("ring8"), TopologyEdit(without_gpus=("g3",)))
    with pytest.raises(SpecError, match="another collective or topology"):
        read_previous(str(bare), _allgather(seven), seven)


@pytest.mark.parametrize("coll, words", [
    (Collective(CollectiveKind.ALLTOALL, SIZE, tuple(range(8))), "coll=allgather"),
    (Collective(CollectiveKind.ALLGATHER, SIZE, tuple(range(8)), inplace=True), "inplace=0"),
])
def test_a_file_for_another_collective_is_refused(previous, coll, words):
    with pytest.raises(SpecError) as e:
        read_previous(previous, coll, load_topology("ring8"))
    assert words in str(e.value) and previous in str(e.value) and e.value.key == "--from"


def test_not_xml_is_refused(tmp_path):
    bad = tmp_path / "x.xml"
    bad.write_text("not xml")
    with pytest.raises(SpecError, match="--from"):
        read_previous(str(bad), _allgather(load_topology("ring8")), load_topology("ring8"))


def test_cli_compiles_from_the_previous_file(teccl, previous, tmp_path):
    topo = tmp_path / "ring8-slow.yaml"
    assert teccl("topo", "edit", "ring8", "--scale-link", "g0:g1=0.5", "-o", str(topo))[0] == 0
    out = tmp_path / "again.xml"
    code, _, err = teccl("compile", str(topo), "-c", "allgather", "--size", "1MiB",
                         "--from", previous, "-o", str(out), "--time-limit", "20")
    assert code == 0, err
    assert teccl("verify", str(out))[0] == 0


STAR = """name: star4
source: a test network
description: four GPUs on a switch that only forwards, and a ring of direct links
defaults: {bandwidth: 25GB/s, latency: 0.7us}
gpus: [g0, g1, g2, g3]
switches: [{name: sw, copy: false, reduce: false, buffer: false}]
links:
  - {between: [g0, sw], bandwidth: 10GB/s}
  - {between: [g1, sw], bandwidth: 10GB/s}
  - {between: [g2, sw], bandwidth: 10GB/s}
  - {between: [g3, sw], bandwidth: 10GB/s}
  - {between: [g0, g1]}
  - {between: [g1, g2]}
  - {between: [g2, g3]}
  - {between: [g3, g0]}
"""


def test_where_no_scale_method_fits_the_previous_routes_are_the_file(teccl, tmp_path):
    star = tmp_path / "star.yaml"
    star.write_text(STAR)
    before = tmp_path / "before.xml"
    te_ccl.compile(str(star), "allgather", size="1GB", output=str(before), time_limit_s=20)
    changed = tmp_path / "star-down.yaml"
    assert teccl("topo", "edit", str(star), "--without-link", "g0:sw",
                 "-o", str(changed))[0] == 0
    res = te_ccl.compile(str(changed), "allgather", size="1GB", output=str(tmp_path / "a.xml"),
                         previous=str(before), time_limit_s=20)
    assert res.incumbents[0].source.startswith("first file: template previous-routes")
    if res.bound_ratio <= 1.1:  # within the gap: they stand, no search
        assert len(res.incumbents) == 1 and any("routes stand" in n for n in res.notes)


@pytest.mark.parametrize("topology, args, words", [
    ("ring8", ["-c", "allreduce", "--size", "1MiB"], "coll=allgather"),
    ("ring8", ["-c", "allgather", "--sizes", "1KB..1MB"], "--from: "),
    ("dgx1", ["-c", "allgather", "--size", "1MiB"], "compiled for ring8, which has no link"),
])
def test_cli_bad_previous_is_one_line_and_exit_2(teccl, previous, tmp_path, topology, args,
                                                 words):
    code, out, err = teccl("compile", topology, *args, "--from", previous,
                           "-o", str(tmp_path / "x"))
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_api_needs_an_output_and_auto(previous):
    with pytest.raises(SpecError, match="previous"):
        te_ccl.compile("ring8", "allgather", size=SIZE, previous=previous)


@pytest.mark.slow
def test_routes_of_a_file_cut_in_many_pieces_fit_the_runtime(tmp_path):
    """ndv2x4's AllGather file is the hierarchical template cut into 12 pieces per rank;
    with a NIC at half rate, the first file comes from it (as it is, where it stands, else
    its routes; as 12 sub-chunks of one chunk they fit none of the runtime's channels, and
    the whole portfolio ran)."""
    before = tmp_path / "before.xml"
    te_ccl.compile("ndv2x4", "allgather", size="1GB", output=str(before), time_limit_s=60)
    changed = edit_topology(load_topology("ndv2x4"), TopologyEdit(
        scale_links=(("b1.g0:sw", 0.5),), name="ndv2x4-slow"))
    res = te_ccl.compile(changed, "allgather", size="1GB", output=str(tmp_path / "a.xml"),
                         previous=str(before), time_limit_s=60)
    assert res.incumbents[0].source.startswith("first file: template previous-")


def test_routes_are_cut_into_the_fewest_pieces_that_stay_near_the_bound():
    """Four pieces per rank, the first two clockwise round a ring and the others
    counter-clockwise: one piece per rank (its first tree, clockwise only) uses half the
    links, two (a tree each way) is within the gap of the bound."""
    topo = ring(4, 50e9)
    c = Collective(CollectiveKind.ALLGATHER, 1 << 30, tuple(range(4)))

    def tree(owner: int, step: int) -> tuple[tuple[int, int], ...]:
        path = [(owner + step * i) % 4 for i in range(4)]
        return tuple(sorted(zip(path[1:], path[:-1], strict=True)))

    trees = tuple((owner * 4 + j, owner, tree(owner, 1 if j < 2 else -1))
                  for owner in range(4) for j in range(4))
    s = warm_schedule(Previous("x.xml", 4, trees), topo, c)
    assert s is not None and check_schedule(s) == []
    assert s.collective.chunks_per_rank == 2
    assert replay_finish(s) <= lower_bound(topo, c).seconds * (1 + QUALITY_GAP)


def test_where_the_scale_backend_repairs_the_trees_go_unread(previous):
    topo = load_topology("ring8")
    p = read_previous(previous, _allgather(topo), topo)
    assert p.trees is None and "scale backend" in p.why and p.pieces > 0


def test_the_repair_stands_in_for_the_portfolio_only():
    """Where a scale method fits, the repair runs the scale backend at the previous
    file's sub-chunks instead of the portfolio; a compile that runs the flow model (a
    maximum horizon) runs it."""
    topo = load_topology("ring8")
    c = _allgather(topo)
    p, kept = Previous("x.xml", 4, None), Incumbent(bound_s=1.0)
    assert repair(p, topo, c, SolveParams(), kept) == SolveParams(backend="scale",
                                                                  max_subchunks=4)
    bounded = SolveParams(max_horizon=40)
    assert repair(p, topo, c, bounded, kept) is bounded
    assert repair(None, topo, c, SolveParams(), kept) == SolveParams()
