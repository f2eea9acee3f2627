"""Replay several MSCCL algorithms at once, each on its own communicator, on one
topology's shared links.

Each member is one file and the topology ranks its ranks run on (rank ``i`` of the file
is GPU ``topology.gpus[ranks[i]]``); members may share GPUs. Every member is replayed as
:func:`~te_ccl.simulate.msccl.simulate_msccl` replays one file — same steps, slots,
routes and α-β link model — but in one event loop, so a link serves the messages of all
members first come, first served: what contention does to algorithms that were each
compiled as if the network were theirs. Members do not wait for each other otherwise
(separate communicators share no connection).

A link is shared by connections, not held by one message. The executor runs each
thread block's steps as primitive calls of at most ``chunkEffectiveSize`` bytes
(``mscclRunInterpreter``), and a connection hands its calls to the link a slice at a
time: the network proxy posts one send per Simple slice of ``MSCCL_SLICESTEPS`` slots
(``sendProxyProgress`` of NCCL's ``transport/net.cc``), each channel's connection its own
queue pair, which the NIC serves in turn; over NVLink each thread block writes its own
peer's buffer. So every message is replayed in pieces of
:meth:`~te_ccl.runtime_limits.RuntimeLimits.slice_bytes` (1 MiB under Simple), and the
messages waiting for a link take turns piece by piece: two jobs on one link each get
about half of it while both send, not one whole message after the other. Members
replayed alone (:func:`cosimulate` of one) move the same pieces, so a job's time alone
and together are measured alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from te_ccl.nogc import paused_gc
from te_ccl.runtime_limits import MSCCL
from te_ccl.simulate.msccl import Flat, prepared, replay
from te_ccl.simulate.result import LinkUse
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.model import Algo

__all__ = ["Member", "CoSimResult", "cosimulate"]


@dataclass(frozen=True)
class Member:
    """One communicator: its algorithm, the topology ranks it runs on, its buffer size."""

    name: str
    algo: Algo
    ranks: tuple[int, ...]
    size_bytes: int
    proto: str | None = None


@dataclass(frozen=True)
class CoSimResult:
    """Each member's finish time, and which links carried whose bytes."""

    finish_s: dict[str, float]
    link_bytes: dict[str, dict[tuple[str, str], float]]  # member → link → bytes sent on it
    links: tuple[LinkUse, ...]

    @property
    def shared_links(self) -> list[tuple[str, str]]:
        """Links that carry bytes of two members or more."""
        count: dict[tuple[str, str], int] = {}
        for per in self.link_bytes.values():
            for key in per:
                count[key] = count.get(key, 0) + 1
        return sorted(k for k, n in count.items() if n > 1)


class _Joined(Flat):
    """Several members' flat lists as one: steps, thread blocks and ranks renumbered
    after each other, link indices shared, and every send's ``cnt`` turned into bytes
    (the loop multiplies it by seconds per byte), so members of different chunk sizes
    share one loop; the call size of a message its receiver forwards call by call
    (``streams``, :mod:`~te_ccl.simulate.msccl`) is in bytes too, its own member's."""

    def __init__(self, topology: Topology, flats: Sequence[tuple[Flat, float]]) -> None:
        self.topo, self.ranks = topology, []
        self.tb_first, self.tb_where, self.tb_conn = [], [], []
        self.nxt, self.dep, self.rmsg, self.rstep, self.slot, self.path = ([] for _ in range(6))
        self.cnt, self.paths, self.link_keys = {}, [], []
        self._link_index, self._graph = {}, None
        self.spans: list[tuple[int, int]] = []  # each member's global step range
        self.streams = {}
        for flat, chunk_bytes in flats:
            base, rank0, path0 = len(self.nxt), len(self.ranks), len(self.paths)
            self.ranks.extend(flat.ranks)
            self.tb_first.extend(t + base for t in flat.tb_first)
            self.tb_where.extend((r + rank0, tb) for r, tb in flat.tb_where)
            self.tb_conn.extend((c, s + rank0, r + rank0) for c, s, r in flat.tb_conn)
            for mine, theirs in ((self.nxt, flat.nxt), (self.dep, flat.dep),
                                 (self.rmsg, flat.rmsg), (self.rstep, flat.rstep),
                                 (self.slot, flat.slot)):
                mine.extend(-1 if i < 0 else i + base for i in theirs)
            self.path.extend(-1 if p < 0 else p + path0 for p in flat.path)
            self.cnt.update({i + base: c * chunk_bytes for i, c in flat.cnt.items()})
            self.streams.update({i + base: c * chunk_bytes for i, c in flat.streams.items()})
            for hops in flat.paths:
                self.paths.append(tuple(self._index(flat.link_keys[h]) for h in hops))
            self.spans.append((base, len(self.nxt)))
        self.nsteps = len(self.nxt)

    def _index(self, key: tuple[str, str]) -> int:
        if key not in self._link_index:
            self._link_index[key] = len(self.link_keys)
            self.link_keys.append(key)
        return self._link_index[key]


def cosimulate(topology: Topology, members: Sequence[Member]) -> CoSimResult:
    """Replay ``members`` together (see the module docstring).

    Raises what :func:`~te_ccl.simulate.msccl.simulate_msccl` raises for any member
    (:class:`~te_ccl.errors.SpecError` for ranks that do not fit it,
    :class:`~te_ccl.errors.VerificationError` for a file that cannot run).
    """
    with paused_gc():
        flats = [prepared(m.algo, topology, m.size_bytes, m.proto, m.ranks) for m in members]
        joined = _Joined(topology, flats)
        pieces: list[float] = []
        for m, (lo, hi) in zip(members, joined.spans, strict=True):
            pieces += [float(MSCCL.slice_bytes(m.proto or m.algo.proto))] * (hi - lo)
        sim, done = replay(joined, 1.0, False, pieces)
    finish: dict[str, float] = {}
    link_bytes: dict[str, dict[tuple[str, str], float]] = {}
    for m, (lo, hi) in zip(members, joined.spans, strict=True):
        finish[m.name] = max(done[lo:hi], default=0.0)
        per: dict[tuple[str, str], float] = {}
        for i in range(lo, hi):
            p = joined.path[i]
            if p >= 0:
                for h in joined.paths[p]:
                    key = joined.link_keys[h]
                    per[key] = per.get(key, 0.0) + joined.cnt[i]
        link_bytes[m.name] = per
    return CoSimResult(finish, link_bytes, sim.links)
