"""Baselines in the Schedule IR (NCCL ring, double binary tree, direct, hierarchical,
packed pipelined trees and flow paths, pipelined link-disjoint trees from a root, and
pipelined trees of fan-out k behind one switch, the far-first AlltoAll).

They go through the same lowering, simulator and report as teccl's own schedules.
:data:`BASELINES` maps a name to ``build(topology, collective) -> Schedule``;
:func:`applicable` says which make sense for a collective on a topology.
"""

from __future__ import annotations

from collections.abc import Callable

from te_ccl.baselines.comb_allreduce import comb_allreduce, combs_apply
from te_ccl.baselines.direct import direct
from te_ccl.baselines.disjoint import (
    applies,
    box_heaps_apply,
    hubs_apply,
    pipeline,
    pipeline_boxes,
    pipeline_fine,
    pipeline_hubs,
    pipeline_units,
    units_apply,
)
from te_ccl.baselines.far_first import FAR_FIRST_MAX_GPUS, far_first
from te_ccl.baselines.hierarchical import find_boxes, hierarchical
from te_ccl.baselines.packed import PACKED_KINDS, packed, packed_fine
from te_ccl.baselines.plan import BaselineError, ChunkPlan, assemble
from te_ccl.baselines.ring import ring, ring_bidir
from te_ccl.baselines.torus_pipeline import pipeline_torus, torus_applies
from te_ccl.baselines.tree import (
    SWITCH_TREE_KINDS,
    TREE_KINDS,
    WIDE_GPUS,
    double_tree,
    switch_trees,
)
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["BASELINES", "BaselineError", "ChunkPlan", "applicable", "assemble", "build_baseline"]

SWITCH_TREES_MAX_GPUS = 72  # GB200 NVL72, the widest switch its binary trees were lowered on
PACKED_FIRST_GPUS = 16
PACKED_MAX_ROOTED = 32  # GPUs beyond which the pipeline template replaces packed for a rooted
#                         collective where it applies

BASELINES: dict[str, Callable[[Topology, Collective], Schedule]] = {
    "ring": ring,
    "ring-bidir": ring_bidir,
    "tree": double_tree,
    "direct": direct,
    "hierarchical": hierarchical,
    "comb-allreduce": comb_allreduce,
    "packed": packed,
    "packed-fine": packed_fine,
    "pipeline": pipeline,
    "pipeline-fine": pipeline_fine,
    "pipeline-boxes": pipeline_boxes,
    "pipeline-hubs": pipeline_hubs,
    "pipeline-units": pipeline_units,
    "pipeline-torus": pipeline_torus,
    "switch-trees": switch_trees,
    "far-first": far_first,
}


def applicable(topology: Topology, collective: Collective) -> list[str]:
    """Baseline names that make sense for ``collective`` on ``topology``."""
    names = ["ring", "ring-bidir", "direct"]
    if collective.kind in TREE_KINDS and collective.nranks > 2:
        names.insert(2, "tree")
    gpus = [topology.gpu(r) for r in collective.ranks]
    if len(find_boxes(topology, gpus)) > 1:
        names.append("hierarchical")
    if collective.kind in PACKED_KINDS and collective.nranks > 2:
        # first for a rooted collective behind switches (a compile's first file is the
        # first template that applies): one ring or tree crosses the fabric at the rate
        # of one of its links, several packed trees at the rate of all of them; up to
        # PACKED_FIRST_GPUS, where it is built in about a second
        first = (collective.root is not None and bool(topology.switches)
                 and collective.nranks <= PACKED_FIRST_GPUS)
        names.insert(0 if first else len(names), "packed")
        names.append("packed-fine")
    if combs_apply(topology, collective):  # a mesh's AllReduce: the combs take every link
        # at the bound's rate, which packed's LP cannot beat; beyond PACKED_FIRST_GPUS
        # instead of it, whose LP takes most of a short compile
        at = names.index("packed")
        if collective.nranks > PACKED_FIRST_GPUS:
            names = [n for n in names if n not in ("packed", "packed-fine")]
        names.insert(at, "comb-allreduce")
    if applies(topology, collective):  # a root with a direct link, boxes, or one switch
        # before packed, built in about a second at any size; beyond PACKED_MAX_ROOTED GPUs
        # instead of it: packed's LP grows with the fabric and can take a short compile's
        # whole search, where the pipeline's trees come as close to the bound
        if collective.nranks > PACKED_MAX_ROOTED:
            names = [n for n in names if n not in ("packed", "packed-fine")]
        at = names.index("packed") if "packed" in names else len(names)
        # as fine as pipeline-fine: before it, the unit arborescences (at the min-cut rate
        # where links differ), a large mesh's or torus's finer pieces (as many as the
        # runtime holds) and a Broadcast's boxes each a hub two box hops from the root's
        # (faster than its chain of boxes on rails; than the heaps on four or eight boxes,
        # not on sixteen: each hub sends to all the others): built for the fabric's shape
        # and first, they get the time its file would take to build and judge; after it,
        # the boxes in two heaps (shallower than its chain, slower on rail8x8's eight)
        fine = ["pipeline-units"] * units_apply(topology, collective) \
            + ["pipeline-torus"] * torus_applies(topology, collective) \
            + ["pipeline-hubs"] * hubs_apply(topology, collective) + ["pipeline-fine"] \
            + ["pipeline-boxes"] * box_heaps_apply(topology, collective)
        names[at:at] = ["pipeline", *fine]
    if collective.kind in SWITCH_TREE_KINDS and collective.root is not None \
            and 2 < collective.nranks <= SWITCH_TREES_MAX_GPUS \
            and len(find_boxes(topology, gpus)) == 1 \
            and not any(topology.has_link(u, v) for u in gpus for v in gpus):
        # GPUs behind switches only, one box; beyond WIDE_GPUS before pipeline-fine, whose
        # relays each send a piece to all the others (GB200 NVL72 Broadcast 64 MB: the
        # binary switch trees 1.15x the bound, pipeline-fine 1.23x)
        wide = collective.nranks > WIDE_GPUS and "pipeline-fine" in names
        names.insert(names.index("pipeline-fine") if wide else len(names), "switch-trees")
    if collective.kind is CollectiveKind.ALLTOALL and 2 < collective.nranks <= FAR_FIRST_MAX_GPUS:
        names.append("far-first")
    return names


def build_baseline(name: str, topology: Topology, collective: Collective) -> Schedule:
    """The schedule of baseline ``name``; raises BaselineError if it does not apply."""
    if name not in BASELINES:
        raise BaselineError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
    return BASELINES[name](topology, collective)
