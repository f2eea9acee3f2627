"""Hierarchical: inside each box, then across boxes (NCCL's tree/ring-of-rings idea).

Boxes come from the topology's ``meta`` (``box_gpus``: consecutive ranks per box, as the
``boxes`` generator records), from node names ``b<i>.<name>``, or, failing both, from the
one switch each GPU hangs off (the L1 switches of a FRED wafer). Each box
has *gateways*, GPUs that reach another box without relaying through a GPU (the GPU with
the InfiniBand link on NDv2, every GPU on a rail network); a chunk crosses boxes between
the gateways with the local index of its source/owner (modulo their number), so
different chunks use different rails.

* A copied chunk walks its box's ring from its source to the local gateway, crosses to
  the gateway of every other box in turn, and walks each box's ring from there.
* A reduced chunk is summed along each box's ring into that box's gateway (into its owner
  in the owner's box), the gateways' partials are summed across boxes into the owner's
  box, and (AllReduce) the sum is spread back as a copied chunk.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import replace

from te_ccl.baselines.cycle import ring_neighbours
from te_ccl.baselines.packed import pieces
from te_ccl.baselines.plan import TEMPLATE, BaselineError, ChunkPlan, assemble
from te_ccl.baselines.ring import owner_of, ring_order, walk
from te_ccl.collective.model import Chunk, Collective, CollectiveKind
from te_ccl.deadline import checked
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["find_boxes", "hierarchical", "hierarchical_as_cut"]

_BOX_NAME = re.compile(r"^b(\d+)\.")
_STEPS = {False: 2.0, True: 4.0}  # a rank's steps per chunk: receive and send, twice to reduce


def find_boxes(topology: Topology, gpus: list[str]) -> list[list[str]]:
    """``gpus`` grouped by box (see the module docstring); one group if no boxes are known."""
    per = topology.meta.get("box_gpus")
    groups: dict[int, list[str]] = defaultdict(list)
    for g in gpus:
        if per:
            groups[topology.rank(g) // int(per)].append(g)
        else:
            m = _BOX_NAME.match(g)
            groups[int(m.group(1)) if m else 0].append(g)
    if len(groups) == 1 and not per:
        return _leaf_groups(topology, gpus)
    return [groups[k] for k in sorted(groups)]


def _leaf_groups(topology: Topology, gpus: list[str]) -> list[list[str]]:
    """``gpus`` grouped by the one switch each links to, if each links to one switch only."""
    leaves: dict[str, list[str]] = defaultdict(list)
    for g in gpus:
        ends = {link.dst for link in topology.out_links(g)}
        if len(ends) != 1 or topology.node(next(iter(ends))).is_gpu:
            return [list(gpus)]
        leaves[next(iter(ends))].append(g)
    return list(leaves.values())


class _Boxes:
    def __init__(self, topology: Topology, collective: Collective) -> None:
        gpus = [topology.gpu(r) for r in collective.ranks]
        self.topo = topology
        self.boxes = find_boxes(topology, gpus)
        if len(self.boxes) < 2:
            raise BaselineError(f"{topology.name} has no boxes (topology meta box_gpus or "
                                "node names b<i>.<gpu>): the hierarchical baseline needs >= 2")
        self.box_of = {g: i for i, box in enumerate(self.boxes) for g in box}
        self.order = [ring_order(topology, box) for box in self.boxes]
        reach = ring_neighbours(topology, gpus)
        self.gateways = [[g for g in box if any(self.box_of[v] != i for v in reach[g])]
                         for i, box in enumerate(self.boxes)]
        if not all(self.gateways):
            raise BaselineError(f"a box of {topology.name} has no GPU that reaches another box")

    def gateway(self, box: int, origin: str) -> str:
        gw = self.gateways[box]
        return gw[self.boxes[self.box_of[origin]].index(origin) % len(gw)]

    def others(self, box: int) -> list[int]:
        n = len(self.boxes)
        return [(box + k) % n for k in range(1, n)]

    def spread(self, origin: str, dests: set[str]) -> dict[str, str]:
        """Copy tree from ``origin``: its box, then each other box through the gateways."""
        home = self.box_of[origin]
        tree: dict[str, str] = {}
        away = [(b, dests & set(self.boxes[b])) for b in self.others(home)]
        away = [(b, need) for b, need in away if need]
        prev = self.gateway(home, origin)
        _add_chain(tree, walk(self.order[home], origin, 1,
                              (dests & set(self.boxes[home])) | ({prev} if away else set())))
        for b, need in away:
            gw = self.gateway(b, origin)
            tree[gw] = prev
            _add_chain(tree, walk(self.order[b], gw, 1, need))
            prev = gw
        return tree

    def gather(self, owner: str, sources: set[str]) -> dict[str, str]:
        """Reduction in-tree into ``owner``: along each box's ring, then across gateways."""
        home = self.box_of[owner]
        tree: dict[str, str] = {}
        targets = {b: self.gateway(b, owner) for b in range(len(self.boxes))}
        for b, box in enumerate(self.boxes):
            end = owner if b == home else targets[b]
            need = (sources & set(box)) | ({targets[home]} if b == home else set())
            back = walk(self.order[b], end, -1, need)
            tree.update({back[i]: back[i - 1] for i in range(1, len(back))})
        chain = [targets[b] for b in self.others(home)] + [targets[home]]
        tree.update({chain[i]: chain[i + 1] for i in range(len(chain) - 1)})
        return tree


def _add_chain(tree: dict[str, str], path: list[str]) -> None:
    for i in range(1, len(path)):
        tree.setdefault(path[i], path[i - 1])


def _plan(boxes: _Boxes, chunk: Chunk) -> ChunkPlan:
    gpu = boxes.topo.gpu
    dests = {gpu(r) for r in chunk.destinations}
    if not chunk.reduce:
        src = gpu(chunk.sources[0])
        return ChunkPlan(chunk.id, src, spread=boxes.spread(src, dests - {src}))
    owner = owner_of(boxes.topo, chunk)
    gather = boxes.gather(owner, {gpu(r) for r in chunk.sources})
    return ChunkPlan(chunk.id, owner, gather, boxes.spread(owner, dests - {owner}))


def _rounds(boxes: _Boxes, plans: list[ChunkPlan]) -> list[ChunkPlan]:
    """``plans`` in pipeline order: round by round (a round holds one chunk of every owner),
    within a round by the owner's place in its box and then by box, so that consecutive
    chunks cross different uplinks."""
    seen: dict[str, int] = defaultdict(int)
    keyed = []
    for p in plans:
        box = boxes.box_of[p.owner]
        keyed.append(((seen[p.owner], boxes.boxes[box].index(p.owner), box), p))
        seen[p.owner] += 1
    return [p for _, p in sorted(keyed, key=lambda kp: kp[0])]


def hierarchical(topology: Topology, collective: Collective) -> Schedule:
    """Intra-box rings joined across boxes by gateway GPUs, for any collective kind,
    pipelined: the collective is cut into pieces (as many as the runtime holds, like the
    packed template's) and each piece's whole tree is placed before the next's, so a
    piece's crossing between boxes runs while the next piece is summed inside its box
    and the one before is spread; slow links start pieces on their epoch grid.

    The pieces do not depend on the chunking asked for unless it asks for more, so the
    chunkings ``auto`` races get the same Schedule object (:func:`_pipelined` keeps the
    last few), which the judge has timed already. An AlltoAll is not cut further: its
    chunks, one per pair of ranks, already pipeline (cut, they overflow the runtime's
    channels)."""
    if collective.kind is CollectiveKind.ALLTOALL:
        return _pipelined(topology, collective)
    cut = pieces(topology, replace(collective, chunks_per_rank=1),
                 _STEPS[collective.is_reduction])
    return _pipelined(topology, max(cut, collective, key=lambda c: c.chunks_per_rank))


def hierarchical_as_cut(topology: Topology, collective: Collective) -> Schedule:
    """The hierarchical template with the chunks of ``collective`` as its pieces, however
    coarse: each piece is one message, so the cut sets how much of a link a communicator
    takes per turn where other communicators' messages take turns on it
    (:mod:`te_ccl.simulate.cosim`)."""
    return _pipelined(topology, collective)


@functools.lru_cache(maxsize=4)
def _pipelined(topology: Topology, collective: Collective) -> Schedule:
    boxes = _Boxes(topology, collective)
    plans = [_plan(boxes, chunk) for chunk in checked(collective.chunks(), TEMPLATE, every=256)]
    return assemble("hierarchical", topology, collective, _rounds(boxes, plans),
                    chunk_major=True, aligned=True)
