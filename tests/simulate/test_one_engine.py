"""The XML replay and the task replay share one engine: the same messages, replayed as a
file's steps and as the engine's tasks, take the same links at the same times."""

import random

import pytest

from te_ccl.simulate.engine import Task, cuts_through, run
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.topology.routes import fastest_path

from .test_msccl_replay import algo, tb

NCHUNKS = 4


def _fabric(rng: random.Random) -> Topology:
    """Two leaf switches of two GPUs each (one of them may buffer), a direct g0-g1 link."""
    nodes = [Node(f"g{i}") for i in range(4)] + [
        Node("s0", NodeKind.SWITCH, has_buffer=rng.random() < 0.5), Node("s1", NodeKind.SWITCH)]
    pairs = [("g0", "s0"), ("g1", "s0"), ("g2", "s1"), ("g3", "s1"), ("s0", "s1")]
    if rng.random() < 0.5:
        pairs.append(("g0", "g1"))
    links = []
    for a, b in pairs:
        for u, v in ((a, b), (b, a)):
            links.append(Link(u, v, rng.uniform(1e9, 1e11), rng.uniform(0.0, 3e-6)))
    return Topology.build("fabric", nodes, links)


@pytest.mark.parametrize("seed", range(20))
def test_messages_take_the_same_links_at_the_same_times_in_both_replays(seed):
    # g0 sends two chunks to g2 one after the other; g2 relays the first on to g3 once it
    # has arrived; g1 sends one chunk to g3 and one to g0. The engine's tasks say the same:
    # a send starts once the previous send of its thread block has left its first link,
    # a relay once its chunk has arrived, a hop past a bufferless switch on the head.
    rng = random.Random(seed)
    topo = _fabric(rng)
    size = rng.randint(10**4, 10**7)
    xml = algo("Simple", NCHUNKS, [
        tb(0, 2, -1, "s s") + tb(1, -1, 1, "r", off=3),
        tb(0, 3, -1, "s") + tb(1, 0, -1, "s", off=1),
        tb(0, 3, 0, "r s r"),
        tb(0, -1, 1, "r") + tb(1, -1, 2, "r", off=2),
    ])
    sim = simulate_msccl(xml, topo, size, intervals=True)
    # (file step label, sender, receiver, after_all message, after_sent message)
    messages = [("r0/tb0/s0", 0, 2, None, None), ("r0/tb0/s1", 0, 2, None, 0),
                ("r1/tb0/s0", 1, 3, None, None), ("r1/tb1/s0", 1, 0, None, None),
                ("r2/tb0/s1", 2, 3, 0, None)]
    tasks: list[Task] = []
    last_hop: list[int] = []
    first_hop: list[int] = []
    for label, src, dst, after, sent in messages:
        path = fastest_path(topo, f"g{src}", f"g{dst}")
        first_hop.append(len(tasks))
        for h, (u, v) in enumerate(zip(path, path[1:], strict=False)):
            if h:
                tasks.append(Task((u, v), size / NCHUNKS, (len(tasks) - 1,), label=label,
                                  through=cuts_through(topo.node(u))))
            else:
                tasks.append(Task((u, v), size / NCHUNKS,
                                  () if after is None else (last_hop[after],), label=label,
                                  after_sent=() if sent is None else (first_hop[sent],)))
        last_hop.append(len(tasks) - 1)
    times = run(topo, tasks)
    from_engine = sorted((t.label, t.link, x.start_s, x.end_s, x.arrive_s)
                         for t, x in zip(tasks, times, strict=True))
    from_file = sorted((i.label, (i.src, i.dst), i.start_s, i.end_s, i.arrive_s)
                       for i in sim.intervals)
    assert from_file == from_engine
