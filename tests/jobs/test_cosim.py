"""The co-simulation's link model: messages of jobs on one link take turns slice by slice."""

import pytest

from te_ccl.runtime_limits import MSCCL
from te_ccl.simulate.cosim import Member, cosimulate
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import Link, Node, Topology
from te_ccl.topology.model import NodeKind
from te_ccl.verify.msccl.reader import read_msccl

BW = 1e9  # bytes per second
SLICE = MSCCL.slice_bytes("Simple")


def _send_xml(chunks: int, cnt: int = 1) -> str:
    """A 2-rank broadcast from rank 0: ``chunks`` sends of ``cnt`` chunks, one step each."""
    sends = "".join(f'<step s="{s}" type="s" srcbuf="i" srcoff="{s * cnt}" dstbuf="o" '
                    f'dstoff="{s * cnt}" cnt="{cnt}" depid="-1" deps="-1" hasdep="0"/>\n'
                    for s in range(chunks))
    recvs = "".join(f'<step s="{s}" type="r" srcbuf="o" srcoff="{s * cnt}" dstbuf="o" '
                    f'dstoff="{s * cnt}" cnt="{cnt}" depid="-1" deps="-1" hasdep="0"/>\n'
                    for s in range(chunks))
    n = chunks * cnt
    return (f'<algo name="b" proto="Simple" nchannels="1" nchunksperloop="{n}" ngpus="2" '
            f'coll="broadcast" inplace="0" outofplace="1" minBytes="0" maxBytes="0">\n'
            f'<gpu id="0" i_chunks="{n}" o_chunks="{n}" s_chunks="0">\n'
            f'<tb id="0" send="1" recv="-1" chan="0">\n{sends}</tb>\n</gpu>\n'
            f'<gpu id="1" i_chunks="0" o_chunks="{n}" s_chunks="0">\n'
            f'<tb id="0" send="-1" recv="0" chan="0">\n{recvs}</tb>\n</gpu>\n</algo>\n')


@pytest.fixture
def link() -> Topology:
    """Two GPUs, one link each way, no latency."""
    return Topology.build("pair", [Node("a"), Node("b")],
                          [Link("a", "b", BW, 0.0), Link("b", "a", BW, 0.0)])


def test_two_jobs_on_one_link_share_it_slice_by_slice(link):
    algo = read_msccl(_send_xml(1))
    size = 4 * SLICE  # one message of four slices each
    jobs = [Member("x", algo, (0, 1), size), Member("y", algo, (0, 1), size)]
    together = cosimulate(link, jobs).finish_s
    # in turns: x's last slice leaves one slice before y's, not x whole before y
    assert together["x"] == pytest.approx(7 * SLICE / BW)
    assert together["y"] == pytest.approx(8 * SLICE / BW)
    alone = cosimulate(link, jobs[:1]).finish_s["x"]
    assert alone == pytest.approx(simulate_msccl(algo, link, size, ranks=(0, 1)).finish_time_s)


def test_sends_of_one_thread_block_get_no_more_of_the_link_than_one_message(link):
    one = read_msccl(_send_xml(1, cnt=2))   # one message of two chunks
    two = read_msccl(_send_xml(2))          # two sends of one chunk, on one connection
    size = 4 * SLICE
    # two sends of one thread block go one after the other: the same share as one message
    together = cosimulate(link, [Member("one", one, (0, 1), size),
                                 Member("two", two, (0, 1), size)]).finish_s
    assert max(together.values()) == pytest.approx(8 * SLICE / BW)
    assert together["one"] == pytest.approx(7 * SLICE / BW)


def test_a_piece_cannot_leave_a_hop_before_its_tail_has_arrived():
    # a -> s -> b through a switch without buffer (cut-through); the second link is faster
    topo = Topology.build("sw", [Node("a"), Node("b"), Node("s", NodeKind.SWITCH)],
                          [Link("a", "s", BW, 1e-6), Link("s", "b", 4 * BW, 1e-6),
                           Link("b", "s", BW, 1e-6), Link("s", "a", BW, 1e-6)])
    algo = read_msccl(_send_xml(1))
    size = 3 * SLICE
    alone = cosimulate(topo, [Member("x", algo, (0, 1), size)]).finish_s["x"]
    # the last slice leaves a at 3 slices' time, reaches s 1 us later, b 1 us after that
    assert alone == pytest.approx(3 * SLICE / BW + 2e-6)
    assert alone == pytest.approx(simulate_msccl(algo, topo, size, ranks=(0, 1)).finish_time_s)
