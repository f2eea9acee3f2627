"""Pass 3: a channel for every edge, keeping each connection's FIFO order on both sides.

MSCCL matches sends and receives on one (peer, channel) connection in order, and a
thread block runs its steps in order. Every step is placed at its time ``order``
(:mod:`instructions`), so an edge sits at its send order on the sender and at its
receive order on the receiver (the send order of the step it is fused into, if any).
An edge may share a channel with the edges already there only if both orders agree.

Edges starting on one connection in the same epoch get different channels, so one link
carrying several chunks at once uses several channels. A fused step (``rcs`` …) puts its
incoming and outgoing edge on one channel and ties the receiving and sending thread
block together, so a chain of fused steps is placed as a unit, on the lowest channel
where all of it fits; otherwise its fusions are dropped and its edges placed one by one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from te_ccl.errors import TecclError
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.instructions import Fusion, recv_order, send_order

__all__ = ["MAX_CHANNELS", "ChannelsExhausted", "assign_channels"]

MAX_CHANNELS = 32


class ChannelsExhausted(TecclError):
    """An edge fits on none of the 32 channels (under the current steps-per-tb cap)."""


@dataclass
class _State:
    """What is already placed: per (connection, channel) edges, per GPU channel pairings."""

    cap: int
    placed: dict[tuple, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    starts: dict[tuple, set[int]] = field(default_factory=lambda: defaultdict(set))
    load: dict[tuple, int] = field(default_factory=lambda: defaultdict(int))
    pair_send: dict[tuple, int] = field(default_factory=dict)  # (gpu, chan, send) -> recv
    pair_recv: dict[tuple, int] = field(default_factory=dict)  # (gpu, chan, recv) -> send


def assign_channels(edges: tuple[Edge, ...], fusions: list[Fusion], cap: int
                    ) -> tuple[dict[Edge, int], list[Fusion]]:
    """Channel of every edge and the fusions kept; ``cap`` bounds steps per tb side."""
    by_in = {f.recv.recv: f for f in fusions}
    by_out = {f.send.send: f for f in fusions}
    state, chan = _State(cap), {}
    kept: list[Fusion] = []
    for head in sorted(e for e in edges if e not in by_out):
        chain, links = [head], []
        while chain[-1] in by_in:
            links.append(by_in[chain[-1]])
            chain.append(links[-1].send.send)
        c = _first_fit(chain, links, state)
        if c is None:
            for e in chain:
                one = _first_fit([e], [], state)
                if one is None:
                    raise ChannelsExhausted(f"chunk {e.chunk} from rank position {e.src} to "
                                            f"{e.dst} needs more than {MAX_CHANNELS} channels")
                _place([e], [], one, state, chan)
        else:
            _place(chain, links, c, state, chan)
            kept.extend(links)
    return chan, kept


def _orders(chain: list[Edge], links: list[Fusion]) -> list[tuple[tuple, tuple]]:
    """(sender order, receiver order) of each edge of a chain."""
    out = []
    for i, e in enumerate(chain):
        recv = send_order(links[i].send.send) if i < len(links) else recv_order(e)
        out.append((send_order(e), recv))
    return out


def _first_fit(chain: list[Edge], links: list[Fusion], state: _State) -> int | None:
    """Lowest channel for the chain; concurrent edges share one only if no other is left."""
    orders = _orders(chain, links)
    for spread in (True, False):
        for c in range(MAX_CHANNELS):
            if all(_edge_fits(e, o, c, state, spread)
                   for e, o in zip(chain, orders, strict=True)) and _pairs_fit(links, c, state):
                return c
    return None


def _edge_fits(e: Edge, orders: tuple[tuple, tuple], c: int, state: _State,
               spread: bool) -> bool:
    conn = (e.src, e.dst, c)
    if spread and e.start in state.starts[conn]:
        return False
    if state.load[(e.src, c, "s", e.dst)] >= state.cap or \
            state.load[(e.dst, c, "r", e.src)] >= state.cap:
        return False
    snd, rcv = orders
    return all((s < snd) == (r < rcv) for s, r in state.placed[conn])


def _pairs_fit(links: list[Fusion], c: int, state: _State) -> bool:
    """Each fused step's (recv peer, send peer) pairing on its GPU stays one-to-one.

    A chain may pass one GPU twice, so its own pairings are checked together.
    """
    new_recv: dict[tuple, int] = {}
    new_send: dict[tuple, int] = {}
    for f in links:
        g, a, b = f.recv.gpu, f.recv.recv.src, f.send.send.dst
        if new_recv.setdefault((g, c, a), state.pair_recv.get((g, c, a), b)) != b or \
                new_send.setdefault((g, c, b), state.pair_send.get((g, c, b), a)) != a:
            return False
    return True


def _place(chain: list[Edge], links: list[Fusion], c: int, state: _State,
           chan: dict[Edge, int]) -> None:
    for e, (snd, rcv) in zip(chain, _orders(chain, links), strict=True):
        conn = (e.src, e.dst, c)
        state.placed[conn].append((snd, rcv))
        state.starts[conn].add(e.start)
        state.load[(e.src, c, "s", e.dst)] += 1
        state.load[(e.dst, c, "r", e.src)] += 1
        chan[e] = c
    for f in links:
        g, a, b = f.recv.gpu, f.recv.recv.src, f.send.send.dst
        state.pair_recv[(g, c, a)] = b
        state.pair_send[(g, c, b)] = a
