"""Pass 3: a channel for every edge, so that the runtime executes the schedule without
mixing up data, blocking forever or exceeding its limits.

The reference execution is the schedule's own time order: every step sits at its
``order`` (:mod:`instructions`), an edge at its send order on the sender and at its
receive order on the receiver (the send order of the step it is fused into, if any).
Dependencies (:mod:`dependencies`) only ever wait for earlier steps. So if every
connection ``(src, dst, channel)`` respects three rules, replaying all steps of all GPUs
in that global order never blocks, and since thread blocks, FIFOs and flags form a
persistent system, no interleaving of the runtime deadlocks either:

* **FIFO order** — an edge shares a channel only with edges whose send and receive
  orders agree with its own (sends and receives are matched in order);
* **FIFO depth** — when an edge is sent, at most ``depth - 1`` earlier edges of the
  connection are still unreceived, ``depth`` being the sends a connection holds under
  the protocol (:meth:`~te_ccl.runtime_limits.RuntimeLimits.outstanding_sends`: 2 under
  Simple, 8 under LL and LL128; a receive fused into a much later send keeps its slot
  occupied);
* **thread-block budget** — the thread block of each side stays within ``budget``
  steps, and a GPU uses at most 32 send and 32 receive peers per channel, on the
  runtime's ``channels`` (32 in the MSCCL executor, 128 in RCCL);
* **waited thread blocks** — a GPU has at most ``waitable`` thread blocks that
  others may wait for (``max_depid + 1``: a ``depid`` has 8 bits; fewer where the
  runtime allows fewer thread blocks, RCCL's 64): its receiving ones, and where
  ``sends_waited`` its sending ones too (then every thread block is counted) (a reduction into a slot, or an in-place
  receive over a value still to be sent, waits for the sends that read it; and a send
  waits for the previous send to the same peer on another channel, :mod:`dependencies`).

Edges starting on one connection in the same epoch prefer different channels, so one
link carrying several chunks at once uses several channels. A fused step (``rcs`` …)
puts its incoming and outgoing edge on one channel and joins the receiving and sending
thread block, so the (recv peer, send peer) pairing per GPU and channel must stay
one-to-one. Chains of fused steps are dealt cyclically over :func:`spread_channels` channels
and grown hop by hop while their channel takes the next hop; a short chain may move to
another of those channels that takes all of it, otherwise the fusion there is dropped
and a new chain starts.

Which pairings a channel gets is planned per GPU (:func:`_plan`): the pairing that serves
most of its fusion candidates is *preferred*, and a channel takes another pairing only
where that blocks no preferred one still open on it (first come, first served let a few
early turns lock every channel of a mesh relay and lost whole directions: 1.41M of 1.83M
fusions kept on the mesh 32×32 AllReduce, 1.56M with the plan). The GPUs with the most
steps left once their preferred fusions are made (*hot*, ≥ :data:`HOT_OVER_MEDIAN` × the median) keep
every :data:`HOT_OPEN_EVERY`-th channel open to any pairing; a chain picks its first channel so
that the hot GPUs on its path can fuse, and where a hot GPU still cannot, the chain gives
up the fusion one GPU earlier instead, if that GPU has fewer steps by :data:`CUT_MARGIN`.
Only single edges go beyond the spread channels: a fused step
may hold its FIFO slot for many epochs, and chains spilt over all 32 channels would pair
peers differently on each and multiply the thread blocks. Each check looks at a few
neighbours in sorted lists (appends in the usual case), so the pass is O(E log E).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property, partial

from te_ccl.deadline import checked
from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.instructions import (
    Fusion,
    first_receipts,
    forwards,
    packed_ends,
    packed_order,
)
from te_ccl.lower.msccl.ir import LOWERING
from te_ccl.runtime_limits import MSCCL

__all__ = ["ChannelsExhausted", "EdgeChannels", "assign_channels", "spread_channels", "extends"]

# a chain that no longer fits its channel moves only while this short: a longer one
# would cost more checks than the fusion it keeps is worth
MOVE_MAX_HOPS = 2
# chains are spread over enough channels that the busiest thread blocks are about
# 1/SPREAD_ROOM full: room for a whole chain on its channel, against more thread blocks
SPREAD_ROOM = 4
# GPUs with more than this times the median steps left after preferred fusions are hot:
# their fusions come first, at the cost of pairings the others prefer
HOT_OVER_MEDIAN = 1.03
# every HOT_OPEN_EVERY-th channel of a hot GPU takes any pairing: more of its fusions
# made, against its preferred pairings kept on every channel
HOT_OPEN_EVERY = 3
# a hot GPU's fusion is kept at the cost of one on a GPU with this share fewer steps
CUT_MARGIN = 0.02


EdgeChannels = dict[int, int]  # the channel of each edge, keyed by id(edge): hashing an edge
#                                reads its eleven fields, and the passes look millions up


class ChannelsExhausted(RuntimeLimitError):
    """An edge fits on none of the runtime's channels (under the current steps-per-tb
    budget)."""


@dataclass
class _Conn:
    """The edges of one ``(src, dst, channel)``, sorted by send order (= receive order).

    Orders are ints that compare as :mod:`instructions`' order tuples do
    (:func:`_order_keys`); ``hold`` maps the receive order of a fused step to (the order at
    which it frees its slot, the bound below which a plain receive after it is held up),
    and is empty where fused steps may hold up receives (:func:`_freed`, :func:`_held_up`).
    No edge whose send order lies strictly between ``lo`` and ``hi`` can join: a run of
    gaps that the FIFO depth has closed for good (:func:`_close`), so that the channels an
    edge tries are refused there without a search.
    """

    snd: list[int] = field(default_factory=list)
    rcv: list[int] = field(default_factory=list)
    starts: set[int] = field(default_factory=set)
    hold: dict[int, tuple[int, int]] = field(default_factory=dict)
    lo: int = 0
    hi: int = 0


_EMPTY = _Conn()  # what a connection without edges holds (never written)
_Lane = list[_Conn]  # the connections of one (src, dst), one per channel
_Ends = tuple[int, int, _Lane]  # an edge's send order, receive order and connections


class _Side:
    """One GPU's thread blocks on one channel: their steps per peer, and the pairings
    that join a receiving and a sending one (the keys of ``sends`` and ``recvs`` are the
    channel's send and receive peers)."""

    __slots__ = ("sends", "recvs", "fused", "pair_send", "pair_recv")

    def __init__(self) -> None:
        self.sends: dict[int, int] = {}                # send peer -> steps (nops counted)
        self.recvs: dict[int, int] = {}                # recv peer -> steps
        self.fused: dict[tuple[int, int], int] = {}    # (recv peer, send peer) -> fused steps
        self.pair_send: dict[int, int] = {}            # send peer -> recv peer
        self.pair_recv: dict[int, int] = {}            # recv peer -> send peer


class _Gpu:
    """Everything placed on one GPU: its channels' thread blocks, the thread blocks others
    may wait for, and as channel bitmasks where each receive and send peer is paired, and
    where each pairing is made (all channels at once: :func:`_free_channels`)."""

    __slots__ = ("sides", "waited", "paired_recv", "paired_send", "paired")

    def __init__(self, channels: int) -> None:
        self.sides = [_Side() for _ in range(channels)]
        self.waited = 0
        self.paired_recv: dict[int, int] = {}          # recv peer -> channels
        self.paired_send: dict[int, int] = {}          # send peer -> channels
        self.paired: dict[tuple[int, int], int] = {}   # (recv peer, send peer) -> channels


@dataclass
class _State:
    """Everything placed so far, per GPU position and channel."""

    budget: int
    spread: int
    sends_waited: bool  # sending thread blocks may be waited for too
    depth: int          # sends a connection holds (the protocol's outstanding sends)
    favour: frozenset[int] = frozenset()  # GPUs whose fusions may hold up their receives
    timed: bool = True  # False: any GPU's fusions may (the file cannot keep the timing)
    waitable: int = MSCCL.waitable  # thread blocks a GPU may have that others wait for
    received: dict[tuple[int, int], Edge] = field(default_factory=dict)  # (GPU, chunk) -> first
    ends: dict[int, _Ends] = field(default_factory=dict)  # by id(edge): orders, connections
    hold: dict[int, tuple[int, int]] = field(default_factory=dict)  # see _Conn.hold
    plan: _Plan = field(default_factory=lambda: _Plan({}, {}, {}, set()))
    channels: int = MSCCL.max_channels  # the runtime's
    gpus: dict[int, _Gpu] = field(init=False)

    def __post_init__(self) -> None:
        self.gpus = defaultdict(partial(_Gpu, self.channels))

    @cached_property
    def firsts(self) -> set[int]:
        """The identities of the edges in ``received`` (first receipts)."""
        return {id(e) for e in self.received.values()}


@dataclass(frozen=True)
class _Plan:
    """The preferred pairing of every GPU, and its steps left once that is fused."""

    send_of: dict[tuple[int, int], int]  # (g, recv peer) -> preferred send peer
    recv_of: dict[tuple[int, int], int]  # (g, send peer) -> preferred recv peer
    steps: dict[int, int]
    hot: set[int]


def assign_channels(edges: tuple[Edge, ...], fusions: list[Fusion], budget: int,
                    sends_waited: bool, depth: int, favour: frozenset[int] = frozenset(),
                    timed: bool = True, received: dict[tuple[int, int], Edge] | None = None,
                    waitable: int = MSCCL.waitable, spread: int | None = None,
                    channels: int = MSCCL.max_channels) -> tuple[EdgeChannels, list[Fusion]]:
    """Channel of every edge (:data:`EdgeChannels`) and the fusions kept; ``budget``
    bounds steps per tb.
    ``sends_waited``: other thread blocks may wait for sending ones (reductions, in-place
    buffers, a connection over several channels); ``depth``: the sends a connection
    holds. The GPU positions in ``favour`` count as the hottest (their fusions go
    first, even those that hold up a receive; without ``timed``, every GPU's may).
    ``received``: :func:`~te_ccl.lower.msccl.instructions.first_receipts` of the edges, if
    the caller has it. ``waitable``: the thread blocks per GPU that others may wait for
    (all the runtime can name, unless other edges take some); ``spread``: the channels
    chains are dealt over (default :func:`spread_channels` of the edges); ``channels``:
    the runtime's."""
    by_in = {id(f.recv.recv): f for f in fusions}
    by_out = {id(f.send.send) for f in fusions}
    plan = _plan(edges, fusions, favour)
    if spread is None:
        spread = spread_channels(edges, budget, sends_waited, channels, waitable)
    ends, hold = _order_keys(edges, by_out, channels)
    state = _State(budget, spread, sends_waited, depth, favour, timed, waitable,
                   first_receipts(edges) if received is None else received, ends, hold,
                   plan=plan, channels=channels)
    chan: EdgeChannels = {}
    kept: list[Fusion] = []
    started: dict[tuple[int, int], int] = defaultdict(int)
    for head in checked(sorted(e for e in edges if id(e) not in by_out), LOWERING):
        c0 = started[(head.src, head.dst)] % state.spread
        started[(head.src, head.dst)] += 1
        chain, links, c = [head], [], _first_channel(head, by_in, state, c0)
        used = {(head.src, head.dst)}
        while (link := by_in.get(id(chain[-1]))) is not None:
            nxt = link.send.send
            if (nxt.src, nxt.dst) in used:  # a chain uses each connection once
                fits = None
            elif c < state.spread and extends(chain[-1], nxt, c, state):
                fits = c
            elif len(chain) <= MOVE_MAX_HOPS:  # long chains stay on their channel
                fits = _first_fit(chain + [nxt], links + [link], state, c0, required=False)
            else:
                fits = None
            if fits is None and links and _cut_pays(link, links[-1], plan):
                placed, fits = _cut_before(chain, links, link, c, c0, state, chan)
                if placed:  # the fusion is given up one GPU earlier
                    kept.extend(links[:-1])
                    chain, links = chain[-1:], []
                    used = {(chain[0].src, chain[0].dst)}
                    if fits is None:  # the placed part took the room after all
                        c = _first_fit(chain, [], state, c0)
            if fits is None:
                _place(chain, links, c, state, chan)
                kept.extend(links)
                chain, links, c = [nxt], [], _first_fit([nxt], [], state, c0)
                used = set()
            else:
                chain.append(nxt)
                links.append(link)
                c = fits
            used.add((nxt.src, nxt.dst))
        _place(chain, links, c, state, chan)
        kept.extend(links)
    return chan, kept


def _plan(edges: tuple[Edge, ...], fusions: list[Fusion], favour: frozenset[int]) -> _Plan:
    """Per GPU the pairing of receive and send peers that most fusion candidates share
    (a greedy matching, heaviest pair first), the steps it leaves (one per edge end,
    less one per preferred fusion) and the hot GPUs (:data:`HOT_OVER_MEDIAN`, and ``favour`` above
    all of them)."""
    demand = Counter((f.recv.gpu, f.recv.recv.src, f.send.send.dst) for f in fusions)
    send_of: dict[tuple[int, int], int] = {}
    recv_of: dict[tuple[int, int], int] = {}
    steps: Counter[int] = Counter()
    for e in edges:
        steps[e.src] += 1
        steps[e.dst] += 1
    for (g, a, b), n in sorted(demand.items(), key=lambda x: (-x[1], x[0])):
        if (g, a) not in send_of and (g, b) not in recv_of:
            send_of[(g, a)], recv_of[(g, b)] = b, a
            steps[g] -= n
    median = sorted(steps.values())[len(steps) // 2] if steps else 0
    hot = {g for g, n in steps.items() if n > HOT_OVER_MEDIAN * median} | favour
    top = 2 * max(steps.values(), default=0)
    return _Plan(send_of, recv_of, {g: top if g in favour else n for g, n in steps.items()},
                 hot)


def _first_channel(head: Edge, by_in: dict[int, Fusion], state: _State, first: int) -> int:
    """The first channel for a chain starting with ``head`` on which the hot GPUs of its
    path can fuse, else (or without any) the first that takes the head. ``by_in``: the
    fusion candidate receiving each edge, by the edge's identity."""
    hot = state.plan.hot
    if not hot:  # no chain to walk (a torus: every GPU alike)
        return _first_fit([head], [], state, first)
    ahead, f = [], by_in.get(id(head))
    while f is not None:
        if f.recv.gpu in hot:
            ahead.append(f)
        f = by_in.get(id(f.send.send))
    if ahead:
        parts, pairings = _parts([head], [], state), [_pairing(f) for f in ahead]
        free = _free_channels(pairings, state)  # the hot GPUs' pairings can fuse there
        for c in [*range(first, state.spread), *range(first)]:
            if free >> c & 1 and _pairs_open(pairings, c, state) and _fits(parts, c, state):
                return c
    return _first_fit([head], [], state, first)


def _cut_pays(link: Fusion, before: Fusion, plan: _Plan) -> bool:
    """Is ``link`` on a hot GPU worth more than the fusion ``before`` it?"""
    g, p = link.recv.gpu, before.recv.gpu
    return g in plan.hot and plan.steps[p] < (1 - CUT_MARGIN) * plan.steps[g]


def _cut_before(chain: list[Edge], links: list[Fusion], link: Fusion, c: int, first: int,
                state: _State, chan: EdgeChannels) -> tuple[bool, int | None]:
    """``link`` does not fit ``chain``'s channel ``c``: place the chain on ``c`` without
    its last fusion, so that its last edge starts a new chain fused by ``link`` on another
    channel. (Whether anything was placed, that channel): nothing if either does not
    fit; the channel is looked for again once the rest is placed (a GPU the two share may
    have reached its waited thread blocks), so rarely None after all."""
    two = [chain[-1], link.send.send]
    if _first_fit(two, [link], state, first, required=False, skip=c) is None \
            or not _fits(_parts(chain[:-1], links[:-1], state), c, state):
        return False, None
    _place(chain[:-1], links[:-1], c, state, chan)
    return True, _first_fit(two, [link], state, first, required=False, skip=c)


def _order_keys(edges: tuple[Edge, ...], fused_out: set[int],
                channels: int = MSCCL.max_channels) -> tuple[dict[int, _Ends], dict[int, tuple[int, int]]]:
    """Every edge's send and receive order (:func:`send_order`, :func:`recv_order`) as an
    int that compares as the order tuple does (:func:`packed_order`: hundreds of thousands
    of bisects and comparisons then run on ints), the connections of its (src, dst)
    (:data:`_EMPTY` until used), and for ``_Conn.hold`` per fused step's receive order (the
    send order of its outgoing edge ``out``): the order ``(out.start + out.busy, 0, out)``
    at which it frees its slot, and the smallest order of a time not before
    ``out.arrive``. The orders are keyed by the edge's identity (hashing an edge reads
    its eleven fields, scattered in memory at millions of edges); ``fused_out`` holds the
    identities of the fusions' outgoing edges; ``channels``: the runtime's."""
    n = len(edges)
    lanes: dict[tuple[int, int], _Lane] = {}
    ends, hold = {}, {}
    for i, e in enumerate(sorted(edges)):
        lane = lanes.get((e.src, e.dst))
        if lane is None:
            lane = lanes[(e.src, e.dst)] = [_EMPTY] * channels
        snd, rcv = packed_ends(e, i, n)
        key = id(e)
        ends[key] = (snd, rcv, lane)
        if key in fused_out:
            hold[snd] = (packed_order((e.start + e.busy, 0, e), i, n),
                         packed_order((e.arrive, 0, e), 0, n))
    return ends, hold


def _orders(chain: list[Edge], links: list[Fusion], state: _State
            ) -> list[tuple[Edge, int, int, _Lane]]:
    """(edge, sender order, receiver order, connections) of the chain's edges; an edge
    fused by ``links[i]`` into the next is received at that one's send order."""
    ends = state.ends
    out = [(e, *ends[id(e)]) for e in chain]
    for i in range(len(links)):
        e, snd, _, lane = out[i]
        out[i] = (e, snd, out[i + 1][1], lane)
    return out


def spread_channels(edges: tuple[Edge, ...], budget: int, sends_waited: bool,
                    channels: int = MSCCL.max_channels, waitable: int = MSCCL.waitable) -> int:
    """How many channels chains are dealt over: enough that the busiest connection fills
    its thread blocks to about 1/SPREAD_ROOM, so a chain finds room on its channel all along
    its path (first fit from channel 0 would fill low channels first and cut chains);
    but few enough (and at most the runtime's ``channels``) that the thread blocks a GPU
    waits for stay within ``waitable`` (ids a ``depid`` can name, < 128, or fewer where
    the runtime allows fewer thread blocks): one per receive peer and channel (a send waits for the receive of its
    value); where sends are waited for, its sending ones too (a reduction into a slot,
    or an in-place receive, waits for earlier reads), but fused steps pair most of them
    with a receiving one, so about ``max(receive peers, send peers) + 2`` per channel
    (measured on the 3D torus)."""
    load: dict[tuple[int, int], int] = defaultdict(int)
    for e in edges:
        load[(e.src, e.dst)] += 1
    busiest = max(load.values(), default=0)
    recv_peers = Counter(dst for _, dst in load)
    waited = recv_peers
    if sends_waited:
        send_peers = Counter(src for src, _ in load)
        waited = Counter({g: max(n, send_peers[g]) + 2 for g, n in recv_peers.items()})
    per_channel = waitable // max(waited.values(), default=1)
    return max(1, min(channels, per_channel, -(-busiest * SPREAD_ROOM // budget)))


def _first_fit(chain: list[Edge], links: list[Fusion], state: _State, first: int,
               required: bool = True, skip: int | None = None) -> int | None:
    """First channel taking the whole chain, trying ``first``, ``first + 1``, … cyclically
    over the spread channels and then, for a single edge, the rest, preferring one
    without a same-epoch edge on its connections; None (or, if ``required``,
    :class:`ChannelsExhausted`) if none. Never channel ``skip``."""
    fallback, parts = None, _parts(chain, links, state)
    order = [*range(first, state.spread), *range(first)]
    if len(chain) == 1:  # only single edges go beyond the spread channels
        order += range(state.spread, state.channels)
        return _first_fit_edge(chain[0], parts, state, order, required, skip)
    free = _free_channels(parts[1], state)
    # the first edge's connection, which :func:`_fits` checks first, where most channels
    # fail (a chain moving off a busy channel tries all of them)
    _, snd, rcv, lane = parts[2][0]
    depth = state.depth
    for c in order:
        if c == skip or not free >> c & 1:
            continue
        conn = lane[c]
        if conn.lo < snd < conn.hi or (conn.snd and not _conn_fits(conn, snd, rcv, depth)):
            continue
        if _fits(parts, c, state, free):
            if all(e.epoch not in lane[c].starts for e, _, _, lane in parts[2]):
                return c
            fallback = c if fallback is None else fallback
    if fallback is None and required:
        e = chain[0]
        raise ChannelsExhausted(f"chunk {e.chunk} from rank position {e.src} to {e.dst} fits "
                                f"on none of the {state.channels} channels")
    return fallback


def _first_fit_edge(e: Edge, parts: _Parts, state: _State, order: list[int],
                    required: bool, skip: int | None) -> int | None:
    """:func:`_first_fit` of a single edge, the most frequent call: the connection's
    FIFO order and depth, inlined where the edge is appended (most channels tried fail
    there), then the thread-block budget."""
    fallback, (ends, _, ((e, snd, rcv, lane),)) = None, parts
    depth = state.depth
    for c in order:
        if c == skip:
            continue
        conn = lane[c]
        sends = conn.snd
        if sends:
            if sends[-1] < snd:
                recvs, hold = conn.rcv, conn.hold
                last = recvs[-1]
                if not last < rcv or (len(sends) >= depth
                                      and not _freed(recvs[-depth], hold) < snd) \
                        or _held_up(last, rcv, hold):
                    continue
            elif conn.lo < snd < conn.hi or not _conn_fits(conn, snd, rcv, depth):
                continue
        if not _steps_fit(ends, [], c, state):
            continue
        if e.epoch not in conn.starts:
            return c
        fallback = c if fallback is None else fallback
    if fallback is None and required:
        raise ChannelsExhausted(f"chunk {e.chunk} from rank position {e.src} to {e.dst} fits "
                                f"on none of the {state.channels} channels")
    return fallback


_Pairing = tuple[int, int, int]  # (GPU, recv peer, send peer) of a fused step
_Parts = tuple[list[tuple], list[_Pairing], list[tuple[Edge, int, int, _Lane]]]


def _parts(chain: list[Edge], links: list[Fusion], state: _State) -> _Parts:
    """What a chain adds to a channel: (GPU, recv peer, send peer) of each of its steps,
    the :func:`_pairing` of its fusions, and :func:`_orders` of its edges."""
    ends = [(chain[0].src, None, chain[0].dst), (chain[-1].dst, chain[-1].src, None)]
    pairings = [_pairing(f) for f in links]
    return ends + pairings, pairings, _orders(chain, links, state)


def _fits(parts: _Parts, c: int, state: _State, free: int | None = None) -> bool:
    """Does the chain fit channel ``c``? Checked in the order in which they fail most
    often: the first edge's connection (on a busy channel: a link carrying many chunks
    at once fills its slots), the pairings its fused steps would clash with (on a mesh;
    a caller trying many channels passes their :func:`_free_channels` as ``free`` and
    tries only those), then the other connections, the preferred pairings and the thread
    blocks."""
    ends, pairings, edges = parts
    depth = state.depth
    for k, (_, snd, rcv, lane) in enumerate(edges):
        conn = lane[c]
        if conn.snd and not _conn_fits(conn, snd, rcv, depth):
            return False
        if k == 0 and free is None and not _free_channels(pairings, state) >> c & 1:
            return False
    return _pairs_open(pairings, c, state) and _steps_fit(ends, pairings, c, state)


def extends(last: Edge, nxt: Edge, c: int, state: _State) -> bool:
    """Does a chain on channel ``c`` ending in ``last`` take ``nxt`` too, fused into it?
    :func:`_fits` of what that hop changes (``last`` now received at ``nxt``'s send
    order, ``nxt``'s receive, the fused step), without building its parts: the check of
    most hops of the pass, so :func:`_free_channels`, :func:`_pairs_open` and
    :func:`_steps_fit` of its one pairing are written out here."""
    snd, _, lane = state.ends[id(last)]
    out, rcv, next_lane = state.ends[id(nxt)]
    conn, depth = lane[c], state.depth
    if conn.snd and not _conn_fits(conn, snd, out, depth):
        return False
    g, a, b = last.dst, last.src, nxt.dst  # the fused step's pairing
    gpu = state.gpus[g]
    if ((gpu.paired_recv.get(a, 0) | gpu.paired_send.get(b, 0))
            & ~gpu.paired.get((a, b), 0)) >> c & 1:
        return False
    conn = next_lane[c]
    if conn.snd and not _conn_fits(conn, out, rcv, depth):
        return False
    side, plan = gpu.sides[c], state.plan
    paired = a in side.pair_recv
    if not paired and not (g in plan.hot and (g + c) % HOT_OPEN_EVERY == 0):
        b2, a2 = plan.send_of.get((g, a), b), plan.recv_of.get((g, b), a)
        if (b2 != b and b2 not in side.pair_send) or (a2 != a and a2 not in side.pair_recv):
            return False
    # the thread blocks of ``nxt``'s receive on GPU ``b`` and of the fused step on ``g``
    budget, far = state.budget, state.gpus[b]
    there = far.sides[c]
    steps = there.recvs.get(g, 0)
    partner = there.pair_recv.get(g)
    if partner is not None:
        steps += there.sends.get(partner, 0) - there.fused.get((g, partner), 0)
    if steps >= budget or \
            side.sends.get(b, 0) + side.recvs.get(a, 0) - side.fused.get((a, b), 0) >= budget:
        return False
    new_there, new_send, new_recv = g not in there.recvs, b not in side.sends, a not in side.recvs
    if not (new_there or new_send or new_recv):
        return True  # no new thread block (a new pairing only merges two)
    peers, waitable = MSCCL.max_peers, state.waitable
    if (new_there and (len(there.recvs) >= peers or far.waited >= waitable)) \
            or (new_send and len(side.sends) >= peers) \
            or (new_recv and len(side.recvs) >= peers):
        return False
    grow = new_recv + (new_send - (not paired) if state.sends_waited else 0)
    return grow <= 0 or gpu.waited + grow <= waitable


def _conn_fits(conn: _Conn, snd: int, rcv: int, depth: int) -> bool:
    """Can an edge with these orders join the connection (FIFO order and depth, and no
    receive held up by a fused step before it)? The most frequent call of the pass; a
    refused insertion into a gap closed for good records its run (:func:`_close`)."""
    sends, recvs, hold = conn.snd, conn.rcv, conn.hold
    n = len(sends)
    if not n:
        return True
    # :func:`_freed` and :func:`_held_up` inlined
    if sends[-1] < snd:  # appended (the usual case for a chain's first edge)
        last = recvs[-1]
        if not last < rcv:
            return False
        if n >= depth:
            freed = recvs[-depth]
            held = hold.get(freed)
            if not (freed if held is None else held[0]) < snd:
                return False
        held = hold.get(last)
        return held is None or not rcv < held[1] or rcv in hold
    if conn.lo < snd < conn.hi:
        return False
    i = bisect_left(sends, snd)
    if _inserts(conn, i, snd, rcv, depth):
        return True
    _close(conn, i, depth)
    return False


def _inserts(conn: _Conn, i: int, snd: int, rcv: int, depth: int) -> bool:
    """:func:`_conn_fits` of an edge inserted before the connection's ``i``-th."""
    sends, recvs, hold = conn.snd, conn.rcv, conn.hold
    n = len(sends)
    after = recvs[i]
    if after < rcv or (i > 0 and recvs[i - 1] > rcv):
        return False
    own = hold.get(rcv)
    if own is None:
        freed = rcv
        if i > 0:
            held = hold.get(recvs[i - 1])
            if held is not None and rcv < held[1]:
                return False
    else:
        freed = own[0]
        if after < own[1] and after not in hold:
            return False
    # the message ``depth`` places earlier must be received before one is sent: the
    # pairs that the insertion at ``i`` makes ``depth`` apart, from the edge itself, to
    # it, and across it
    if i + depth - 1 < n and not freed < sends[i + depth - 1]:
        return False
    if i >= depth and not _freed(recvs[i - depth], hold) < snd:
        return False
    return not _closed(conn, i, depth)


def _closed(conn: _Conn, i: int, depth: int) -> bool:
    """Is the gap before the connection's ``i``-th edge closed for good? Two edges
    ``depth - 1`` apart across it whose first is not received (its slot not freed) before
    the last is sent leave no room between them; they stay that close, since nothing can
    join between them, so the gap never opens again."""
    sends, recvs, hold = conn.snd, conn.rcv, conn.hold
    for k in range(max(0, i - depth + 1), min(i, len(sends) - depth + 1)):
        if not _freed(recvs[k], hold) < sends[k + depth - 1]:
            return True
    return False


def _close(conn: _Conn, i: int, depth: int) -> None:
    """If the gap before the ``i``-th edge is :func:`_closed`, record the run of closed
    gaps around it as the send orders no edge can join between (``lo``, ``hi``)."""
    if not _closed(conn, i, depth):
        return
    a, b, last = i, i, len(conn.snd) - 1
    while a > 1 and _closed(conn, a - 1, depth):
        a -= 1
    while b < last and _closed(conn, b + 1, depth):
        b += 1
    conn.lo, conn.hi = conn.snd[a - 1], conn.snd[b]


def _freed(rcv: int, hold: dict[int, tuple[int, int]]) -> int:
    """When the receive of order ``rcv`` frees its slot of the connection: a plain
    receive at once, a fused step once its send has left its first link, if the
    connection's ``hold`` has it (for deadlock freedom its start is enough)."""
    held = hold.get(rcv)
    return rcv if held is None else held[0]


def _held_up(before: int, after: int, hold: dict[int, tuple[int, int]]) -> bool:
    """Would the receive ``after`` wait for the fused step ``before`` in its thread block?
    A fused step is done once its send has left; a plain receive next in the thread block
    arriving before that would be taken late, and so would what waits for its value."""
    held = hold.get(before)
    return held is not None and after not in hold and after < held[1]


def _tb_steps(side: _Side, recv: int | None, send: int | None) -> int:
    """Steps already in the thread block of ``side`` (a GPU's channel) that holds its
    receives from ``recv`` and/or sends to ``send`` (their pairing partners included)."""
    if send is not None and recv is None:
        recv = side.pair_send.get(send)
    elif recv is not None and send is None:
        send = side.pair_recv.get(recv)
    steps = side.sends.get(send, 0) if send is not None else 0
    if recv is not None:
        steps += side.recvs.get(recv, 0)
        if send is not None:
            steps -= side.fused.get((recv, send), 0)
    return steps


def _steps_fit(ends: list[tuple], pairings: list[_Pairing], c: int, state: _State
               ) -> bool:
    """Each (GPU, recv peer, send peer) of a chain adds one step to one of its thread
    blocks (all different: a chain uses each connection once, and a clash of pairings is
    refused by :func:`_free_channels`); new peers on the channel stay within ``max_peers``,
    and new thread blocks within the waited ones a GPU can have."""
    new: dict[tuple, set[int]] | None = None
    budget, gpus = state.budget, state.gpus
    for g, recv, send in ends:
        side = gpus[g].sides[c]
        if _tb_steps(side, recv, send) >= budget:
            return False
        if send is not None and send not in side.sends:
            new = new if new is not None else defaultdict(set)
            new[(g, "s")].add(send)
        if recv is not None and recv not in side.recvs:
            new = new if new is not None else defaultdict(set)
            new[(g, "r")].add(recv)
    if new is None:  # no new thread block (a new pairing only merges two)
        return True
    for (g, way), peers in new.items():
        side = gpus[g].sides[c]
        if len(side.sends if way == "s" else side.recvs) + len(peers) > MSCCL.max_peers:
            return False
    grow: dict[int, int] = defaultdict(int)
    for (g, way), peers in new.items():
        if way == "r" or state.sends_waited:
            grow[g] += len(peers)
    if state.sends_waited:
        for g, a, _ in pairings:
            if a not in gpus[g].sides[c].pair_recv:
                grow[g] -= 1
    return all(gpus[g].waited + n <= state.waitable for g, n in grow.items() if n > 0)


def _pairing(f: Fusion) -> _Pairing:
    """(GPU, recv peer, send peer) of a fused step."""
    return f.recv.gpu, f.recv.recv.src, f.send.send.dst


def _free_channels(pairings: list[_Pairing], state: _State) -> int:
    """The channels (a bitmask) on which no pairing clashes with one made there: its GPU
    receives from its recv peer, or sends to its send peer, in another pairing (a clash
    stays: pairings are never undone). All channels at once, since most channels a chain
    tries fail here."""
    free, gpus = -1, state.gpus
    for g, a, b in pairings:
        gpu = gpus[g]
        free &= ~((gpu.paired_recv.get(a, 0) | gpu.paired_send.get(b, 0))
                  & ~gpu.paired.get((a, b), 0))
    return free


def _pairs_open(pairings: list[_Pairing], c: int, state: _State) -> bool:
    """No new pairing takes a peer from a preferred pairing still open on channel ``c``."""
    plan, gpus = state.plan, state.gpus
    for g, a, b in pairings:
        side = gpus[g].sides[c]
        if a in side.pair_recv or (g in plan.hot and (g + c) % HOT_OPEN_EVERY == 0):
            continue
        b2, a2 = plan.send_of.get((g, a), b), plan.recv_of.get((g, b), a)
        if (b2 != b and b2 not in side.pair_send) or (a2 != a and a2 not in side.pair_recv):
            return False
    return True


def _place(chain: list[Edge], links: list[Fusion], c: int, state: _State,
           chan: EdgeChannels) -> None:
    """Record the chain on channel ``c``. Where links keep the schedule's order, a step
    that waits for a value written in another thread block also waits for the link's
    previous send: a ``nop``, which the budget would otherwise only meet in the dependency
    pass. So the chain's first send counts twice if the GPU has received the value by
    then, and so does a fused step whose receive writes a slot an earlier receive wrote
    (a partial sum, or an AllReduce's all-gather over its reduce-scatter)."""
    gpus, sends_waited = state.gpus, state.sends_waited
    for e, snd, rcv, lane in _orders(chain, links, state):
        src, dst = e.src, e.dst
        conn = lane[c]
        if conn is _EMPTY:
            conn = lane[c] = _Conn(hold=state.hold if state.timed and dst not in state.favour
                                   else {})
        if conn.snd and snd < conn.snd[-1]:
            i = bisect_left(conn.snd, snd)
            conn.snd.insert(i, snd)
            conn.rcv.insert(i, rcv)
        else:
            conn.snd.append(snd)
            conn.rcv.append(rcv)
        conn.starts.add(e.epoch)
        sender, receiver = gpus[src], gpus[dst]
        to = sender.sides[c].sends
        if dst not in to and sends_waited:
            sender.waited += 1
        _count(to, dst)
        of = receiver.sides[c].recvs
        if src not in of:
            receiver.waited += 1
        _count(of, src)
        chan[id(e)] = c
    head, received = chain[0], state.received
    if state.timed:  # counted once the peers are (a new one adds a waited thread block)
        if forwards(head, received):
            _count(gpus[head.src].sides[c].sends, head.dst)
        for f in links:
            into = f.recv.recv
            if id(into) not in state.firsts:  # a receive after the first
                _count(gpus[into.dst].sides[c].sends, f.send.send.dst)
    bit = 1 << c
    for f in links:
        g, a, b = f.recv.gpu, f.recv.recv.src, f.send.send.dst
        gpu = gpus[g]
        side = gpu.sides[c]
        if sends_waited and a not in side.pair_recv:
            gpu.waited -= 1  # two thread blocks become one
        side.pair_recv[a] = b
        side.pair_send[b] = a
        gpu.paired_recv[a] = gpu.paired_recv.get(a, 0) | bit
        gpu.paired_send[b] = gpu.paired_send.get(b, 0) | bit
        gpu.paired[(a, b)] = gpu.paired.get((a, b), 0) | bit
        _count(side.fused, (a, b))


def _count(counts: dict, key: object) -> None:
    """One more ``key`` in ``counts`` (a plain dict: reads of a defaultdict would add keys,
    and the keys of a side's counts are its peers)."""
    counts[key] = counts.get(key, 0) + 1
