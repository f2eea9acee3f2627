"""XML replay agrees with the schedule replay; a solved schedule agrees with its prediction."""


import pytest

from te_ccl.backends.base import SolveParams
from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.compiler import solve
from te_ccl.errors import VerificationError
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.simulate import chain_length, simulate_schedule
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import generators as gen
from te_ccl.verify.msccl.reader import read_msccl
from tests.verify.xmltools import REFERENCE, needs_reference


def test_xml_of_a_ring_replays_to_the_nccl_formula():
    n, bw, alpha, size = 8, 50e9, 1e-6, 8 * 2**20
    t = gen.ring(n, bw, alpha)
    sched = build_baseline("ring", t, Collective(K.ALLGATHER, size, tuple(range(n))))
    xml = lower_to_msccl(sched).decode()
    expect = (n - 1) * (alpha + size / n / bw)
    assert simulate_msccl(xml, t, size).finish_time_s == pytest.approx(expect, rel=1e-9)
    assert simulate_schedule(sched).finish_time_s == pytest.approx(expect, rel=1e-9)


@needs_reference
def test_reference_ring_file_and_contention_through_a_switch():
    algo = read_msccl(REFERENCE / "generated" / "azure_allgather_ring_8_1_1.xml")
    size = 8 * 2**20
    fc = simulate_msccl(algo, gen.fully_connected(8, 50e9, 1e-6), size)
    assert fc.finish_time_s == pytest.approx(7 * (1e-6 + size / 8 / 50e9), rel=1e-9)
    # The same file on an 8-port switch with 50 GB/s ports: two hops per send, no sharing.
    star = simulate_msccl(algo, gen.star(8, 50e9, 0.5e-6), size)
    assert star.finish_time_s > fc.finish_time_s
    busy = {(u.src, u.dst): u.busy_s for u in star.links}
    assert busy[("g0", "sw")] == pytest.approx(7 * size / 8 / 50e9, rel=1e-9)


def test_xml_mismatched_receive_is_reported():
    xml = ('<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" '
           'coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="0">\n'
           '<gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">\n'
           '<tb id="0" send="-1" recv="1" chan="0">\n'
           '<step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" '
           'depid="-1" deps="-1" hasdep="0"/>\n</tb>\n</gpu>\n'
           '<gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">\n</gpu>\n</algo>\n')
    with pytest.raises(VerificationError, match="receives 1 message"):
        simulate_msccl(xml, gen.ring(2, 1e9), 2000)


@pytest.mark.parametrize("kind,topo", [
    (K.ALLGATHER, gen.ring(4, 50e9, 0.7e-6)),
    (K.BROADCAST, gen.mesh([2, 3], 25e9, 0.5e-6)),
    (K.ALLREDUCE, gen.fully_connected(4, 50e9, 0.7e-6)),
])
def test_simulated_solver_schedule_is_within_the_epoch_rounding_bound(kind, topo):
    root = 0 if kind is K.BROADCAST else None
    coll = Collective(kind, 4 * 2**20, tuple(range(topo.ngpus)), root=root)
    sched = solve(topo, coll, SolveParams(time_limit_s=20, threads=1))
    sim = simulate_schedule(sched).finish_time_s
    predicted, tau = sched.finish_time_s, sched.epoch_s
    assert sim <= predicted * (1 + 1e-9)
    if sched.info.optimal:
        assert sim > predicted - chain_length(sched) * tau
