"""The XML replay: connection slots per protocol, cut-through switches, deadlocks, the
provenance comment, and the bound it must never beat."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.baselines import build_baseline
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.errors import SpecError, VerificationError
from te_ccl.lower.msccl import build_program
from te_ccl.lower.msccl.to_xml import program_to_xml
from te_ccl.simulate.msccl import read_provenance, simulate_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.topology import generators as gen
from te_ccl.verify.msccl import verify_msccl

US = 1e-6
SHIPPED = Path(__file__).resolve().parents[2] / "schedules"
HEADER = ('<algo name="t" proto="{proto}" nchannels="1" nchunksperloop="{n}" ngpus="{g}" '
          'coll="{coll}" inplace="0" outofplace="1" minBytes="0" maxBytes="0">\n')


def step(s: int, kind: str, off: int) -> str:
    src, dst = ("i", "o") if kind == "s" else ("o", "o")
    return (f'      <step s="{s}" type="{kind}" srcbuf="{src}" srcoff="{off}" dstbuf="{dst}" '
            f'dstoff="{off}" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n')


def tb(tid: int, send: int, recv: int, kinds: str, off: int = 0) -> str:
    body = "".join(step(s, k, off + s) for s, k in enumerate(kinds.split()))
    return f'    <tb id="{tid}" send="{send}" recv="{recv}" chan="0">\n{body}    </tb>\n'


def algo(proto: str, nchunks: int, gpus: list[str], coll: str = "custom") -> str:
    body = "".join(f'  <gpu id="{g}" i_chunks="{nchunks}" o_chunks="{nchunks}" s_chunks="0">\n'
                   f"{tbs}  </gpu>\n" for g, tbs in enumerate(gpus))
    return HEADER.format(proto=proto, n=nchunks, g=len(gpus), coll=coll) + body + "</algo>\n"


def ring_allgather(n: int, rings: int = 1, proto: str = "LL128") -> str:
    """msccl-tools' ring AllGather (in place, as its generator writes it) with ``rings``
    rings on as many channels, every other one running backwards."""
    head = HEADER.format(proto=proto, n=n * rings, g=n, coll="allgather").replace(
        'inplace="0" outofplace="1"', 'inplace="1" outofplace="0"').replace(
        'nchannels="1"', f'nchannels="{rings}"')
    out = [head]
    for r in range(n):
        out.append(f'  <gpu id="{r}" i_chunks="0" o_chunks="{n * rings}" s_chunks="0">\n')
        for ch in range(rings):
            d = -1 if ch % 2 else 1
            out.append(f'    <tb id="{ch}" send="{(r + d) % n}" recv="{(r - d) % n}" '
                       f'chan="{ch}">\n')
            for k in range(n):
                c = (r - d * k) % n * rings + ch
                kind = "s" if k == 0 else "r" if k == n - 1 else "rcs"
                out.append(f'      <step s="{k}" type="{kind}" srcbuf="o" srcoff="{c}" '
                           f'dstbuf="o" dstoff="{c}" cnt="1" depid="-1" deps="-1" '
                           'hasdep="0"/>\n')
            out.append("    </tb>\n")
        out.append("  </gpu>\n")
    return "".join(out) + "</algo>\n"


def pair(alpha: float) -> Topology:
    return Topology.build("pair", [Node("g0"), Node("g1")],
                          [Link("g0", "g1", 1e9, alpha), Link("g1", "g0", 1e9, alpha)])


# Three sends of 1 us each from rank 0 to rank 1, α 10 us, received as they come.
THREE = [tb(0, 1, -1, "s s s"), tb(0, -1, 0, "r r r")]


@pytest.mark.parametrize("proto,finish", [("LL", 13), ("LL128", 13), ("Simple", 22)])
def test_a_connection_holds_two_sends_under_simple_and_eight_under_ll(proto, finish):
    # LL: the sends leave at 0, 1, 2 us and arrive 10 us later. Simple: the third send
    # needs the slot of the first, freed when rank 1 has received it (11 us).
    sim = simulate_msccl(algo(proto, 3, THREE), pair(10 * US), 3000)
    assert sim.finish_time_s == pytest.approx(finish * US, rel=1e-12)


def test_the_proto_argument_overrides_the_files():
    xml = algo("LL", 3, THREE)
    assert simulate_msccl(xml, pair(10 * US), 3000, proto="Simple").finish_time_s == \
        pytest.approx(22 * US, rel=1e-12)
    with pytest.raises(SpecError, match="proto"):
        simulate_msccl(xml, pair(10 * US), 3000, proto="fast")


def test_three_sends_each_way_before_receiving_deadlock_at_depth_two_only():
    # One thread block per rank sends three chunks, then receives three: under LL the
    # eight slots hold them; under Simple each third send waits for the peer's first
    # receive, which comes after the peer's own third send.
    gpus = [tb(0, 1, 1, "s s s r r r"), tb(0, 0, 0, "s s s r r r")]
    assert simulate_msccl(algo("LL", 6, gpus), pair(US), 6000).finish_time_s > 0
    with pytest.raises(VerificationError, match="deadlocks.*step 2 waits for a free slot"):
        simulate_msccl(algo("Simple", 6, gpus), pair(US), 6000)


def test_a_step_waits_for_its_thread_block_and_its_dependency():
    # Rank 0: tb 0 sends chunk 0 (1 us); tb 1's send waits (depid) for it, then sends.
    dep = ('      <step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="o" dstoff="1" cnt="1" '
           'depid="0" deps="0" hasdep="0"/>\n')
    first = tb(0, 1, -1, "s").replace('hasdep="0"', 'hasdep="1"')
    gpus = [first + f'    <tb id="1" send="1" recv="-1" chan="1">\n{dep}    </tb>\n',
            tb(0, -1, 0, "r") + tb(1, -1, 0, "r", 1).replace('chan="0"', 'chan="1"')]
    xml = algo("Simple", 2, gpus).replace('nchannels="1"', 'nchannels="2"')
    sim = simulate_msccl(xml, pair(0.0), 2000)
    assert sim.finish_time_s == pytest.approx(2 * US, rel=1e-12)


def test_unmatched_messages_and_missing_dependencies_are_reported():
    with pytest.raises(VerificationError, match="receives 1 message.*0 sent"):
        simulate_msccl(algo("Simple", 1, ["", tb(0, -1, 0, "r")]), pair(0.0), 1000)
    with pytest.raises(VerificationError, match="receives 0 message.*1 sent"):
        simulate_msccl(algo("Simple", 1, [tb(0, 1, -1, "s"), ""]), pair(0.0), 1000)
    bad = tb(0, 1, -1, "s").replace('depid="-1" deps="-1"', 'depid="3" deps="0"')
    with pytest.raises(VerificationError, match="missing step 0 of thread block 3"):
        simulate_msccl(algo("Simple", 1, [bad, tb(0, -1, 0, "r")]), pair(0.0), 1000)


def test_the_gpu_count_must_match_the_topology_unless_ranks_are_given():
    xml = algo("LL", 3, THREE)
    with pytest.raises(SpecError, match="2 GPUs, topology ring4 4"):
        simulate_msccl(xml, gen.ring(4, 1e9, 10 * US), 3000)
    # Ranks 0 and 1 of the file on GPUs 2 and 3 of the ring (a direct link, as above).
    sim = simulate_msccl(xml, gen.ring(4, 1e9, 10 * US), 3000, ranks=[2, 3])
    assert sim.finish_time_s == pytest.approx(13 * US, rel=1e-12)
    assert set(sim.gpu_finish_s) == {"g2", "g3"}


@pytest.mark.parametrize("alpha", [0.7 * US, 0.0])
@pytest.mark.parametrize("buffer,hops", [(False, 1), (True, 2)])
def test_ring_through_one_switch_is_cut_through_unless_it_buffers(buffer, hops, alpha):
    # n-1 sequential steps of GPU -> switch -> GPU; each costs 2α plus the chunk's time on
    # one link (cut-through: both links carry it at once) or on both (store and forward).
    # Without α, a message's head enters the switch's link the moment it leaves the GPU:
    # an event at the replay's current time.
    n, bw, size = 16, 150e9, 2**30
    star = gen.star(n, bw, alpha, switch=gen.SwitchCaps(buffer=buffer))
    sim = simulate_msccl(ring_allgather(n), star, size)
    assert sim.finish_time_s == pytest.approx((n - 1) * (hops * size / n / bw + 2 * alpha),
                                              rel=1e-9)


def test_a_message_entering_a_switch_at_once_takes_its_turn_by_step_order():
    # g0 -> sw has no α, so g0's second send enters the switch's link to g2 the moment it
    # starts (at T, after its first), an event the replay adds at its current time. g1's
    # send reaches the switch at T too (α = T on g1 -> sw). Of two messages at one link at
    # once, the earlier step of the file goes first: g0's, though its event came later.
    size, bw = 3000, 1e9
    t = size / 3 / bw  # one chunk on one link: T
    nodes = [Node("g0"), Node("g1"), Node("g2"), Node("sw", NodeKind.SWITCH)]
    links = [Link(g, "sw", bw, t if g == "g1" else 0.0) for g in ("g0", "g1", "g2")] + \
        [Link("sw", g, bw, 0.0) for g in ("g0", "g1", "g2")]
    xml = algo("Simple", 3, [tb(0, 2, -1, "s s"), tb(0, 2, -1, "s", off=2),
                             tb(0, -1, 0, "r r") + tb(1, -1, 1, "r", off=2)])
    sim = simulate_msccl(xml, Topology.build("t", nodes, links), size, intervals=True)
    into_g2 = [(i.start_s / t, i.label) for i in sim.intervals if i.dst == "g2"]
    assert into_g2 == [(0.0, "r0/tb0/s0"), (pytest.approx(1.0), "r0/tb0/s1"),
                       (pytest.approx(2.0), "r1/tb0/s0")]
    assert sim.finish_time_s == pytest.approx(3 * t)


def test_dgx2_ring_allgather_is_within_a_percent_of_the_bound():
    dgx2 = load_topology("dgx2")
    sim = simulate_msccl(ring_allgather(16), dgx2, 2**30)
    bound = lower_bound(dgx2, Collective(K.ALLGATHER, 2**30, tuple(range(16)))).seconds
    assert bound <= sim.finish_time_s <= 1.01 * bound


@settings(max_examples=25, deadline=None)
@given(alphas=st.lists(st.floats(0, 5e-6), min_size=2, max_size=2),
       bws=st.lists(st.floats(1e9, 1e11), min_size=2, max_size=2),
       size=st.integers(1000, 10**8))
def test_one_message_through_a_switch_follows_the_cut_through_formula(alphas, bws, size):
    # finish = max over links of (start + bytes/b) + Σα, the links starting together.
    nodes = [Node("g0"), Node("g1"), Node("sw", NodeKind.SWITCH)]
    links = [Link("g0", "sw", bws[0], alphas[0]), Link("sw", "g1", bws[1], alphas[1]),
             Link("g1", "sw", bws[1], alphas[1]), Link("sw", "g0", bws[0], alphas[0])]
    topo = Topology.build("t", nodes, links)
    xml = algo("Simple", 1, [tb(0, 1, -1, "s"), tb(0, -1, 0, "r")])
    sim = simulate_msccl(xml, topo, size)
    want = max(size / bws[0], size / bws[1]) + sum(alphas)
    assert sim.finish_time_s == pytest.approx(want, rel=1e-9)


def test_provenance_comment_round_trips_and_the_verifier_skips_it():
    topo = gen.ring(4, 1e9, US)
    sched = build_baseline("ring", topo, Collective(K.ALLGATHER, 4096, tuple(range(4))))
    xml = program_to_xml(build_program(sched), provenance=(topo.name, 4096)).decode()
    assert xml.splitlines()[1] == "  <!-- teccl: topology=ring4 size_bytes=4096 -->"
    assert read_provenance(xml) == ("ring4", 4096)
    assert verify_msccl(xml).valid
    plain = program_to_xml(build_program(sched)).decode()
    assert read_provenance(plain) is None
    assert "<!--" not in program_to_xml(build_program(sched),
                                        provenance=("two words", 1)).decode()
    assert simulate_msccl(xml, topo, 4096).finish_time_s == \
        simulate_msccl(plain, topo, 4096).finish_time_s


def _shipped_small():
    if not (SHIPPED / "index.json").is_file():
        return []
    return [(e["topology"], e["collective"]) for e in json.loads((SHIPPED / "index.json")
                                                                 .read_text())
            if e["status"] == "ok" and e.get("format", "xml") == "xml" and e["ngpus"] <= 16
            and e["collective"] in
            ("allgather", "reducescatter", "allreduce", "alltoall")]


@pytest.mark.parametrize("name,kind", _shipped_small())
def test_shipped_xml_never_replays_below_the_bound(name, kind):
    summary = json.loads((SHIPPED / name / f"{kind}.json").read_text())
    topo = load_topology(name)
    coll = Collective(K(kind), summary["size_bytes"], tuple(range(topo.ngpus)))
    bound = lower_bound(topo, coll).seconds
    for f in (summary["output"], summary["inplace_output"]):
        try:
            sim = simulate_msccl(SHIPPED / f, topo, summary["size_bytes"])
        except VerificationError as e:  # deadlocks at the real slots: never a time
            assert "deadlocks" in str(e)
            continue
        assert sim.finish_time_s >= bound * (1 - 1e-9)


@pytest.mark.parametrize("topology,kind", [
    *((t, k) for t in ("dgx1", "dgx2", "mesh4x4", "torus4x4", "mi250")
      for k in (K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE)),
    ("ndv2x2", K.ALLGATHER), ("dgx2x2", K.ALLGATHER)])
def test_baseline_xml_never_replays_below_the_bound(topology, kind):
    topo = load_topology(topology)
    coll = Collective(kind, 64 * 2**20, tuple(range(topo.ngpus)))
    sched = build_baseline("ring", topo, coll)
    xml = program_to_xml(build_program(sched)).decode()
    sim = simulate_msccl(xml, topo, coll.size_bytes)
    assert sim.finish_time_s >= lower_bound(topo, coll).seconds * (1 - 1e-9)


@pytest.mark.slow
def test_a_256_gpu_file_of_a_quarter_million_steps_replays_at_the_bound():
    # Four rings (two each way) on a 256-GPU bidirectional ring: every link carries two
    # chains of 255 dependent sends, and the replay must keep it saturated.
    n, size = 256, 2**30
    topo = gen.ring(n, 50e9, 1e-9)
    sim = simulate_msccl(ring_allgather(n, rings=4, proto="Simple"), topo, size)
    bound = (n - 1) / n * size / (2 * 50e9)  # a GPU receives all but its part on 2 links
    assert bound <= sim.finish_time_s <= 1.01 * bound
    assert sim.intervals == () and len(sim.gpu_finish_s) == n


def test_gather_and_scatter_chunks_are_a_rank_piece_over_nchunksperloop():
    """The executor's count for gather and scatter is one rank's piece (no ngpus factor),
    so the compile's reported replay equals the schedule's."""
    import te_ccl

    for kind in ("gather", "scatter"):
        result = te_ccl.compile("ring8", kind, size="1MB", time_limit_s=10)
        assert result.timing.xml_s == pytest.approx(result.timing.schedule_s, rel=0.01)


def test_the_replay_stops_at_the_compiles_deadline(monkeypatch):
    import te_ccl.simulate.msccl as replay
    from te_ccl.deadline import TimeLimitReached, until
    from te_ccl.verify.msccl import read_msccl

    monkeypatch.setattr(replay, "CHECK_EVERY", 1)
    xml = read_msccl(ring_allgather(4))
    with until(0.0), pytest.raises(TimeLimitReached, match="while replaying the MSCCL XML"):
        simulate_msccl(xml, gen.ring(4, 1e9), 1 << 20)
    with until(3600.0):
        assert simulate_msccl(xml, gen.ring(4, 1e9), 1 << 20).finish_time_s > 0
