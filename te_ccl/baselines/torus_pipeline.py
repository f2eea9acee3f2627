"""``pipeline-torus``: a Broadcast or Reduce down a large torus's shallowest trees (a
mesh's link-disjoint ones) in as many pieces as the runtime holds.

A pipelined tree of depth ``D`` ends about ``D − 1`` piece times after the root's links
fall silent, and every piece is one transfer into each of the other ``N − 1`` GPUs.
``pipeline-fine``'s :data:`~te_ccl.baselines.disjoint.FINE_TRANSFERS` then cut a torus of
more than about 200 GPUs into fewer pieces than the runtime's
:data:`~te_ccl.baselines.packed.FINE_PIECES` (torus 8×8×8: 391, for 13-hop trees; mesh
32×32: 195, for 62-hop trees), so its fill stays a large share of the stream however
shallow the trees (:func:`~te_ccl.baselines.grid_trees.torus_trees`). This template cuts
:data:`~te_ccl.baselines.packed.FINE_PIECES` pieces (within the runtime's element limit):
its file is larger, so where the time left does not allow it at
:data:`~te_ccl.baselines.disjoint.TRANSFER_S` a transfer, it takes the finest fraction of
them that is still finer than ``pipeline-fine``'s and does
(:func:`~te_ccl.baselines.disjoint.fine_transfers`).
"""

from __future__ import annotations

from te_ccl.baselines.disjoint import FINE_TRANSFERS, fine_transfers, pipeline
from te_ccl.baselines.packed import FINE_PIECES
from te_ccl.baselines.plan import BaselineError
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["pipeline_torus", "torus_applies"]


def torus_applies(topology: Topology, collective: Collective) -> bool:
    """Is ``collective`` a Broadcast or Reduce from a root over every GPU of a fabric of
    direct links only (a mesh, a torus), so many that ``pipeline-fine`` cuts fewer than
    :data:`~te_ccl.baselines.packed.FINE_PIECES` pieces?"""
    return collective.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE) \
        and collective.root is not None and collective.nranks == topology.ngpus \
        and FINE_PIECES * (collective.nranks - 1) > FINE_TRANSFERS and not topology.switches


def pipeline_torus(topology: Topology, collective: Collective) -> Schedule:
    """The Broadcast or Reduce down the torus's trees in up to
    :data:`~te_ccl.baselines.packed.FINE_PIECES` pieces, fewer where the time left
    allows fewer (module docstring)."""
    if not torus_applies(topology, collective):
        raise BaselineError("the torus pipeline is for broadcast and reduce over every GPU "
                            "of a fabric of direct links only (a mesh, a torus) with more than "
                            f"{FINE_TRANSFERS // FINE_PIECES + 1} GPUs")
    transfers = fine_transfers("the torus pipeline's file", FINE_PIECES * (collective.nranks - 1),
                               FINE_TRANSFERS)
    return pipeline(topology, collective, transfers, name="pipeline-torus")
