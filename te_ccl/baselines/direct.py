"""Direct (all-pairs): every source sends straight to every destination.

Copied chunks go from their source to each destination; reduced chunks are sent by every
source to their owner, which adds them and (AllReduce) sends the sum to every other rank.
Each GPU→GPU send takes the direct link or the fastest path.
"""

from __future__ import annotations

from te_ccl.baselines.plan import TEMPLATE, ChunkPlan, assemble
from te_ccl.baselines.ring import owner_of
from te_ccl.collective.model import Collective
from te_ccl.deadline import checked
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["direct"]


def direct(topology: Topology, collective: Collective, in_flight: int | None = None
           ) -> Schedule:
    """All-pairs schedule for any collective kind; ``in_flight``: at most that many chunks
    under way on a link at once (paced to what the runtime's connections hold)."""
    gpu, plans = topology.gpu, []
    for chunk in checked(collective.chunks(), TEMPLATE, every=256):
        owner = owner_of(topology, chunk) if chunk.reduce else gpu(chunk.sources[0])
        spread = {gpu(d): owner for d in chunk.destinations if gpu(d) != owner}
        gather = {gpu(s): owner for s in chunk.sources if gpu(s) != owner} if chunk.reduce else {}
        plans.append(ChunkPlan(chunk.id, owner, gather, spread))
    return assemble("direct", topology, collective, plans, in_flight=in_flight)
