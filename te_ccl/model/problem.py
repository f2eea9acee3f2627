"""The problem every backend solves: demands on a network whose links are counted in epochs.

A :class:`Problem` is solver-neutral: node names, chunk ids, link timings (see
:mod:`te_ccl.model.epochs`) and the node roles that decide which forwarding constraints
apply — ``copy_nodes`` may multicast, ``buffered_nodes`` may hold a chunk across epochs
(GPUs always; switches only with ``has_buffer``; a switch without a buffer forwards in the
epoch a chunk arrives). ``tree`` marks the reversed AllGather/Broadcast behind a reduction:
every copy node then receives a chunk at most once, and switches copy only where they can
reduce. :class:`State` carries what earlier rounds left behind (held chunks, arrivals
still under way, link starts before epoch 0).

Several jobs in one problem (:func:`merge_problems`): ``owners`` maps each chunk to its
job, ``barred`` each job to the nodes its chunks may not enter (other jobs' GPUs: a job's
MSCCL file holds its own ranks only), and ``weights`` each job to the weight of its finish
epoch in the objective (:func:`te_ccl.model.constraints.finish`). All empty for one
collective.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.topology import Link, Node, Topology
>>> topo = Topology.build("pair", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
>>> p = build_problem(topo, Collective(CollectiveKind.ALLGATHER, 2000, (0, 1)))
>>> p.demands[0], p.epoch_s
(Demand(chunk=0, sources=('a',), destinations=('b',)), 1e-06)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import networkx as nx

from te_ccl.collective.model import Collective
from te_ccl.deadline import checked
from te_ccl.errors import SpecError
from te_ccl.model.epochs import LinkTiming, epoch_duration, link_timing
from te_ccl.topology.model import Topology

__all__ = ["Demand", "Reduction", "State", "Problem", "make_problem", "build_problem",
           "demands_of", "link_timings", "members_of", "allreduce_problem", "reduction_root",
           "merge_problems", "MAX_DELAY_EPOCHS"]

Key = tuple[str, str]
MAX_DELAY_EPOCHS = 10_000  # epochs one hop may take: the model grows with it


@dataclass(frozen=True)
class Demand:
    """Chunk ``chunk`` held by ``sources`` at epoch 0 must reach every one of ``destinations``."""

    chunk: int
    sources: tuple[str, ...]
    destinations: tuple[str, ...]


@dataclass(frozen=True)
class Reduction:
    """The partials of chunk ``chunk`` at ``sources`` are summed, in forward time, into
    ``root``, which then holds the chunk its :class:`Demand` (with ``sources == (root,)``)
    sends on: an AllReduce solved as one problem. Partials meet at GPUs and at switches
    that reduce; a switch without buffer merges only what arrives in one epoch."""

    chunk: int
    sources: tuple[str, ...]
    root: str


@dataclass(frozen=True)
class State:
    """Where a (partial) schedule left things, in epochs relative to this problem's epoch 0.

    ``held``: (chunk, node) pairs held at epoch 0 (a node in ``sources`` is always held).
    ``incoming``: (chunk, node, epoch) arrivals already under way, epoch ≥ 0.
    ``busy``: (link, epoch < 0) starts whose occupancy reaches into epochs ≥ 0.
    ``relayed``: GPU → relayed chunks already counted against its buffer.
    """

    held: frozenset[tuple[int, str]] = frozenset()
    incoming: tuple[tuple[int, str, int], ...] = ()
    busy: tuple[tuple[Key, int], ...] = ()
    relayed: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Problem:
    topology: Topology
    chunk_bytes: float
    epoch_s: float
    timings: dict[Key, LinkTiming] = field(compare=False)
    demands: tuple[Demand, ...]
    copy_nodes: frozenset[str]
    buffered_nodes: frozenset[str]
    relay_limit: dict[str, int] = field(compare=False)
    tree: bool = False
    state: State = State()
    reductions: dict[int, Reduction] = field(default_factory=dict, compare=False)
    owners: dict[int, str] = field(default_factory=dict, compare=False)
    barred: dict[str, frozenset[str]] = field(default_factory=dict, compare=False)
    weights: dict[str, int] = field(default_factory=dict, compare=False)

    def barred_for(self, chunk: int) -> frozenset[str]:
        """Nodes ``chunk`` may not enter: its job's barred nodes (none for one collective)."""
        owner = self.owners.get(chunk)
        return self.barred.get(owner, frozenset()) if owner is not None else frozenset()

    @property
    def merge_nodes(self) -> frozenset[str]:
        """Nodes where partials of one chunk may be added: GPUs and reducing switches."""
        return frozenset(n.name for n in self.topology.nodes if n.is_gpu or n.can_reduce)

    def holds(self, chunk: int, node: str) -> bool:
        """Is ``node`` holding ``chunk`` at epoch 0?"""
        return (chunk, node) in self.state.held

    def with_state(self, state: State, demands: tuple[Demand, ...]) -> Problem:
        return replace(self, state=state, demands=demands)

    @property
    def size(self) -> int:
        """Chunk-link pairs: the per-epoch number of transfer variables (for backend choice)."""
        return len(self.demands) * len(self.timings)


def make_problem(topology: Topology, chunk_bytes: float, demands: tuple[Demand, ...], *,
                 epoch_s: float, tree: bool = False, multicast: bool = True,
                 members: frozenset[str] | None = None) -> Problem:
    """Node roles and link timings for ``demands`` on ``topology`` with epochs of ``epoch_s``.

    ``multicast=False`` forbids copies everywhere (pure flows: the LP backend).
    ``members``: the GPUs running the collective (None: all). The runtime runs the
    algorithm on those alone, so links to or from any other GPU are left out: chunks
    relay through members and switches only.
    """
    copy_nodes, buffered = set(), set()
    for n in topology.nodes:
        can_copy = n.can_reduce if tree else n.can_copy
        if n.is_gpu or (n.has_buffer and (can_copy or not tree)):
            buffered.add(n.name)
        if multicast and (n.is_gpu or can_copy):
            copy_nodes.add(n.name)
    limit = {n.name: int(n.buffer_bytes // chunk_bytes) for n in topology.nodes
             if n.is_gpu and n.buffer_bytes is not None}
    timings = link_timings(topology, chunk_bytes, epoch_s, members)
    held = frozenset((d.chunk, s) for d in demands for s in d.sources)
    return Problem(topology, chunk_bytes, epoch_s, timings, demands, frozenset(copy_nodes),
                   frozenset(buffered), limit, tree, State(held=held))


def link_timings(topology: Topology, chunk_bytes: float, epoch_s: float,
                 members: frozenset[str] | None = None) -> dict[Key, LinkTiming]:
    """The timings of the links between ``members`` (None: all) and switches; refuses
    (:class:`SpecError`) epochs so short that a hop takes more than
    :data:`MAX_DELAY_EPOCHS` of them."""
    outside = set() if members is None else set(topology.gpus) - members
    timings = {k.key: link_timing(k, chunk_bytes, epoch_s) for k in topology.links
               if k.src not in outside and k.dst not in outside}
    slowest = max(timings.values(), key=lambda lt: lt.delay, default=None)
    if slowest is not None and slowest.delay > MAX_DELAY_EPOCHS:
        u, v = slowest.key
        raise SpecError(f"epochs of {epoch_s:.3g} s are too short for {chunk_bytes:.6g}-byte "
                        f"chunks: one crosses {u}→{v} in {slowest.delay:.3g} epochs, at most "
                        f"{MAX_DELAY_EPOCHS} fit a model (use a longer epoch, or fastest)",
                        key="epoch")
    return timings


def demands_of(topology: Topology, collective: Collective) -> tuple[Demand, ...]:
    """The collective's non-reduced chunks as demands between node names (empty ones dropped)."""
    out = []
    for c in collective.chunks():
        if c.reduce:
            raise SpecError(f"chunk {c.id} of {collective.kind.value} is a reduction; "
                            "solve it through te_ccl.compiler.solve", key="collective")
        if c.destinations:
            out.append(Demand(c.id, tuple(topology.gpu(r) for r in c.sources),
                              tuple(topology.gpu(r) for r in c.destinations)))
    return tuple(out)


def build_problem(topology: Topology, collective: Collective,
                  epoch: str | float = "fastest", *, multicast: bool = True) -> Problem:
    """The problem of a non-reducing collective: τ by ``epoch`` policy, demands from its chunks."""
    for r in collective.ranks:
        if not 0 <= r < topology.ngpus:
            raise SpecError(f"rank {r} is not in topology {topology.name!r} "
                            f"({topology.ngpus} GPUs)", key="ranks")
    chunk = collective.chunk_bytes
    if chunk <= 0:
        raise SpecError(f"size {collective.size_bytes} bytes is too small for "
                        f"{collective.nchunks} chunks", key="size")
    return make_problem(topology, chunk, demands_of(topology, collective),
                        epoch_s=epoch_duration(topology, chunk, epoch), multicast=multicast,
                        members=members_of(topology, collective))


def members_of(topology: Topology, collective: Collective) -> frozenset[str]:
    """The GPUs running ``collective`` (its ranks')."""
    return frozenset(topology.gpu(r) for r in collective.ranks)


def reduction_root(topology: Topology, sources: tuple[str, ...], members: frozenset[str],
                   owner: str) -> str:
    """Where an AllReduce chunk's partials meet: the switch that reduces and copies nearest
    (fewest hops to the farthest source) to all of ``sources``, else ``owner``.

    A reducing switch adds the partials as they pass and multicasts the sum, so each GPU
    sends and receives the chunk once; summing at a GPU sends it up and down its links twice.
    """
    graph = topology.graph()
    graph.remove_nodes_from(set(topology.gpus) - members)
    best: tuple[int, str] | None = None
    for n in topology.nodes:
        if n.is_gpu or not (n.can_reduce and n.can_copy) or n.name not in graph:
            continue
        hops = nx.single_source_shortest_path_length(graph.reverse(copy=False), n.name)
        if all(s in hops for s in sources):
            far = max(hops[s] for s in sources)
            best = min(best or (far, n.name), (far, n.name))
    return owner if best is None else best[1]


def allreduce_problem(topology: Topology, collective: Collective,
                      epoch: str | float = "fastest") -> Problem:
    """An AllReduce as one problem: each chunk's partials are summed in forward time into
    its root (:func:`reduction_root`; the rank that owns the chunk when no switch reduces),
    which multicasts the sum to every rank. Reduction and multicast overlap across chunks,
    where ReduceScatter-then-AllGather runs them one after the other."""
    chunk = collective.chunk_bytes
    if chunk <= 0:
        raise SpecError(f"size {collective.size_bytes} bytes is too small for "
                        f"{collective.nchunks} chunks", key="size")
    members = members_of(topology, collective)
    owner = collective.reduction_owners()
    demands, reductions = [], {}
    for c in checked(collective.chunks(), every=64):
        sources = tuple(topology.gpu(r) for r in c.sources)
        root = reduction_root(topology, sources, members, topology.gpu(owner[c.id]))
        demands.append(Demand(c.id, (root,), tuple(topology.gpu(r) for r in c.destinations
                                                   if topology.gpu(r) != root)))
        reductions[c.id] = Reduction(c.id, sources, root)
    problem = make_problem(topology, chunk, tuple(demands), members=members,
                           epoch_s=epoch_duration(topology, chunk, epoch))
    return replace(problem, reductions=reductions, state=State())


def merge_problems(parts: dict[str, Problem], barred: dict[str, frozenset[str]],
                   weights: dict[str, int]) -> tuple[Problem, dict[str, int]]:
    """One problem holding every job's demands (``parts``: job → its problem, all with one
    chunk size and epoch, on one topology) on the shared link capacity, and each job's
    chunk offset (job chunk ``c`` is merged chunk ``c + offset``).

    Timings are the topology's whole (a job's problem may have left out other jobs'
    GPUs); ``barred`` keeps each job's chunks off the nodes it may not use instead.
    """
    first = next(iter(parts.values()))
    if any(p.chunk_bytes != first.chunk_bytes or p.epoch_s != first.epoch_s
           or p.tree != first.tree for p in parts.values()):
        raise SpecError("the jobs' problems differ in chunk size, epoch or kind; they "
                        "merge only with one chunk size and epoch", key="jobs")
    whole = make_problem(first.topology, first.chunk_bytes, (), epoch_s=first.epoch_s,
                         tree=first.tree)
    demands: list[Demand] = []
    reductions: dict[int, Reduction] = {}
    owners: dict[int, str] = {}
    held: set[tuple[int, str]] = set()
    offsets: dict[str, int] = {}
    offset = 0
    for job, p in parts.items():
        offsets[job] = offset
        ids = [d.chunk for d in p.demands] + list(p.reductions)
        for d in p.demands:
            demands.append(replace(d, chunk=d.chunk + offset))
        for c, r in p.reductions.items():
            reductions[c + offset] = replace(r, chunk=c + offset)
        held.update((c + offset, n) for c, n in p.state.held)
        owners.update((c + offset, job) for c in ids)
        offset += max(ids, default=-1) + 1
    merged = replace(whole, demands=tuple(demands), reductions=reductions, owners=owners,
                     barred=dict(barred), weights=dict(weights),
                     state=State(held=frozenset(held)))
    return merged, offsets
