"""The pipeline template: link-disjoint trees from the root, pipelined near the bound."""

from collections import Counter, defaultdict

import pytest

from te_ccl.baselines import BaselineError, applicable, build_baseline, disjoint
from te_ccl.baselines.disjoint import REDUCE_FAN, box_trees, disjoint_trees, pipeline_fine
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.deadline import until
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.topology import generators as gen
from te_ccl.verify.msccl.reader import read_msccl
from te_ccl.verify.msccl.verify import verify_msccl
from tests.baselines.replay import file_ratio

MESH = gen.mesh([6, 6], 50e9, 0.5e-6)
TORUS = gen.torus([4, 4], 50e9, 0.5e-6)


def _depth(tree, v):
    d = 0
    while v in tree:
        v, d = tree[v], d + 1
    return d


@pytest.mark.parametrize(("topology", "count", "depth"), [(MESH, 2, 10), (TORUS, 4, 5)],
                         ids=["mesh6x6", "torus4x4"])
def test_one_tree_per_root_link_spanning_sharing_no_link_and_shallow(topology, count, depth):
    gpus = list(topology.gpus)
    trees = disjoint_trees(topology, gpus[0], gpus)
    assert len(trees) == count
    links = [(p, c) for tree in trees for c, p in tree.items()]
    assert len(links) == len(set(links)) == count * (len(gpus) - 1)
    assert all(set(tree) == set(gpus[1:]) for tree in trees)
    # a mesh corner's trees reach the far corner in its distance, a torus's within a hop more
    assert max(_depth(tree, v) for tree in trees for v in tree) == depth


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE, K.GATHER, K.SCATTER],
                         ids=lambda k: k.value)
def test_rooted_collectives_pipeline_near_the_bound_in_a_valid_file(kind):
    coll = Collective(kind, 16_000_000, tuple(range(9)), root=0)
    assert 1 <= file_ratio("pipeline", gen.mesh([3, 3], 50e9, 0.5e-6), coll) <= 1.05


@pytest.mark.parametrize("kind", [K.BROADCAST, K.SCATTER, K.GATHER], ids=lambda k: k.value)
def test_gpus_behind_one_switch_take_two_hops_from_the_root(kind):
    """One switch, no boxes: a Broadcast's piece goes to one GPU, which sends it to the
    rest (each GPU relays its share of the pieces); Scatter and Gather go straight."""
    star = gen.star(8, 450e9, 0.7e-6)
    coll = Collective(kind, 16_000_000, tuple(range(8)), root=0)
    assert "pipeline" in applicable(star, coll)
    senders = defaultdict(set)  # chunk -> the GPUs that send it into the switch
    for t in build_baseline("pipeline", star, coll).transfers:
        if star.node(t.src).is_gpu:
            senders[t.chunk].add(t.src)
    assert max(map(len, senders.values())) == (2 if kind is K.BROADCAST else 1)
    assert 1 <= file_ratio("pipeline", star, coll) <= 1.10


def test_a_reduce_behind_one_switch_is_refused():
    """Its relays would each sum from every other GPU: more thread blocks than a GPU runs."""
    star = gen.star(8, 450e9, 0.7e-6)
    coll = Collective(K.REDUCE, 1_000_000, tuple(range(8)), root=0)
    assert "pipeline" not in applicable(star, coll)
    with pytest.raises(BaselineError, match="one switch"):
        build_baseline("pipeline", star, coll)


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE], ids=lambda k: k.value)
def test_boxes_on_rails_stream_a_share_down_every_rail(kind):
    """Four GPUs a box behind a switch, a rail per GPU: the root's box sends a share over
    each rail, and its own share through each of its three peers in turn."""
    rails = gen.rail_optimized(2, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    gpus = list(rails.gpus)
    shares = box_trees(rails, gpus[0], gpus)
    trees = [t for _, t in shares]
    assert len(trees) == 3 + 3 and sum(w for w, _ in shares) == pytest.approx(4)
    assert all(set(t) == set(gpus[1:]) for t in trees)
    coll = Collective(kind, 16_000_000, tuple(range(8)), root=0)
    assert 1 <= file_ratio("pipeline", rails, coll) <= 1.10


def test_the_shares_of_a_part_pass_through_different_relays():
    """Two DGX-2 boxes (16 GPUs behind a switch, 8 gateways on InfiniBand): in the far box
    the shares of one part (trees in a row) are handed on by different GPUs, so no GPU's
    link into the switch carries two of the pieces that arrive together, and the
    Broadcast's file comes within 7% of the bound (it was 11% with one relay taking two)."""
    dgx = load_topology("dgx2x2")
    gpus = list(dgx.gpus)
    trees = [t for _, t in box_trees(dgx, gpus[0], gpus)]
    relays = [Counter(p for c, p in t.items() if c.startswith("b1.") and p.startswith("b1."))
              .most_common(1)[0][0] for t in trees]
    assert all(len(set(relays[i:i + 8])) == 8 for i in range(0, len(relays), 8))
    coll = Collective(K.BROADCAST, 64_000_000, tuple(range(32)), root=0)
    assert 1 <= file_ratio("pipeline", dgx, coll) <= 1.07


def test_no_rail_carries_more_than_its_share_and_a_piece():
    """The root's share is cut into a part per relay of its box, the other shares are
    whole trees: each piece goes to the tree it keeps closest to its share, so the root's
    rail carries no more than the others (each small tree rounding up gave it 133 of
    1024 pieces on HGX H100 ×4, the others 127-128)."""
    rails = gen.rail_optimized(4, 8, 450e9, 50e9, 0.7e-6, 1.3e-6)
    coll = Collective(K.BROADCAST, 64_000_000, tuple(range(32)), root=0)
    schedule = pipeline_fine(rails, coll)
    sent = Counter(x.src for x in schedule.transfers
                   if x.dst.startswith("rail") and x.src.startswith("b0."))
    assert len(sent) == 8 and max(sent.values()) <= schedule.collective.nchunks // 8 + 1


def test_the_fine_reduce_sums_up_shallow_heaps_in_each_box():
    """HGX H100 ×2-like rails, Reduce of 64 MB in a thousand pieces: each GPU sums at
    most REDUCE_FAN partials of a piece from its box (a heap, two levels below the relay
    in a box of eight), and the file stays within 10% of the bound (a gateway summing
    each piece from its whole box: 1.32×)."""
    rails = gen.rail_optimized(2, 8, 450e9, 50e9, 0.7e-6, 1.3e-6)
    coll = Collective(K.REDUCE, 64_000_000, tuple(range(16)), root=0)
    schedule = pipeline_fine(rails, coll)
    partials = Counter((x.chunk, x.dst) for x in schedule.transfers if x.dst in rails.gpus)
    assert max(partials.values()) <= REDUCE_FAN + 1  # from the box's heap and from the rail
    data = lower_to_msccl(schedule).decode()
    assert verify_msccl(data).valid
    replay = simulate_msccl(read_msccl(data), rails, coll.size_bytes).finish_time_s
    assert 1 <= replay / lower_bound(rails, coll).seconds <= 1.10


def test_a_box_heap_of_fan_out_three_is_two_levels_below_its_relay():
    """The eight GPUs of a far box below the GPU the share comes in by: a chain is seven
    deep, a heap of fan-out three two levels (1 + 3 + 3)."""
    rails = gen.rail_optimized(2, 8, 450e9, 50e9, 0.7e-6, 1.3e-6)
    gpus = list(rails.gpus)

    def depth_in_far_box(fan: int | None) -> int:
        worst = 0
        for _, tree in box_trees(rails, gpus[0], gpus, fan):
            for v in (g for g in tree if g.startswith("b1.")):
                n = 0
                while tree[v].startswith("b1."):
                    v, n = tree[v], n + 1
                worst = max(worst, n)
        return worst

    assert (depth_in_far_box(1), depth_in_far_box(3), depth_in_far_box(None)) == (7, 2, 1)


def test_the_fine_pipeline_is_one_file_wherever_the_time_left_holds_it(monkeypatch):
    """Where the time left holds the finest file, more time does not make it finer (the
    same file at 30 s and at 3000 s); where it holds none finer than the pipeline's, the
    finer file is not built."""
    import te_ccl.baselines.disjoint as disjoint

    mesh = gen.mesh([4, 4], 50e9, 0.5e-6)
    coll = Collective(K.BROADCAST, 16_000_000, tuple(range(16)), root=0)
    per_piece = 15  # transfers: a piece crosses each of the 15 links of one tree
    monkeypatch.setattr(disjoint, "MAX_TRANSFERS", 64 * per_piece)
    monkeypatch.setattr(disjoint, "FINE_TRANSFERS", 256 * per_piece)
    assert disjoint.pipeline(mesh, coll, disjoint.MAX_TRANSFERS).collective.chunks_per_rank \
        == 64
    monkeypatch.setattr(disjoint, "left", lambda: 0.1)  # less than the file costs
    with pytest.raises(BaselineError, match="time left"):
        build_baseline("pipeline-fine", mesh, coll)
    fine = []
    for seconds in (30.0, 3000.0):
        monkeypatch.setattr(disjoint, "left", lambda seconds=seconds: seconds)
        fine.append(build_baseline("pipeline-fine", mesh, coll).collective.chunks_per_rank)
    assert fine == [256, 256]


def test_no_finer_pipeline_where_the_pieces_are_as_many_already():
    coll = Collective(K.BROADCAST, 1_000_000, tuple(range(9)), root=0)
    with pytest.raises(BaselineError, match="no finer pieces"):
        build_baseline("pipeline-fine", gen.mesh([3, 3], 50e9, 0.5e-6), coll)


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE], ids=lambda k: k.value)
def test_a_chain_through_the_switches_where_it_carries_all_the_root_sends(kind):
    """FRED's wafer: one link per NPU, uplinks as fast as an L1's NPUs together. A chain
    through every NPU streams at the root's rate and fills a piece per NPU, where relays
    that send each piece to their L1 in turn fill several."""
    wafer = gen.fred("fred-c", 8)
    coll = Collective(kind, 16_000_000, tuple(range(8)), root=0)
    senders = defaultdict(set)  # chunk -> the NPUs that send or sum it into a switch
    for t in build_baseline("pipeline", wafer, coll).transfers:
        if wafer.node(t.src).is_gpu:
            senders[t.chunk].add(t.src)
    assert {len(s) for s in senders.values()} == {7}  # each piece: one send per NPU
    assert 1 <= file_ratio("pipeline", wafer, coll) <= 1.05


@pytest.mark.parametrize(("slower", "limit", "transfers"), [
    (1.0, 60.0, 200_000), (1.0, 20.0, 141_421), (2.0, 20.0, 70_710)])
def test_fine_transfers_the_finest_rung_the_time_left_lowers(monkeypatch, slower, limit,
                                                             transfers):
    """Rungs a fourth of an octave apart (200,000 / 2^(j/4)): half of 20 s holds 166,667
    transfers at 6e-5 s each, below the 168,179 of the first rung down."""
    monkeypatch.setattr(disjoint, "slowdown", lambda: slower)
    with until(limit):
        assert disjoint.fine_transfers("a file", 200_000, 20_000) == transfers


def test_fine_transfers_none_finer_than_the_coarse_file_in_time(monkeypatch):
    monkeypatch.setattr(disjoint, "slowdown", lambda: 1.0)
    with until(1.0), pytest.raises(BaselineError, match="no time left"):
        disjoint.fine_transfers("a file", 200_000, 20_000)
