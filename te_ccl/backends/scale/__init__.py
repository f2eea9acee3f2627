"""The ``scale`` backend: hundreds to thousands of GPUs in seconds, near the bound.

* :mod:`.torus` — torus symmetry: one source's broadcast trees scheduled once (list
  scheduling, CP-SAT when that misses the bound), translated to every source;
* :mod:`.greedy` — epoch-by-epoch link–chunk assignment on bitsets for other GPU-only
  topologies;
* :mod:`.alltoall` — AlltoAll on rail-optimized clusters: PXN routing that loads every NIC
  equally (the max-concurrent-flow optimum), NIC slots as box permutations;
* :mod:`.hierarchical` — AllGather (and the reversed fan-out of ReduceScatter / AllReduce)
  on boxes behind a switch joined by rails or direct links: each chunk crosses once to
  every other box, then spreads through the box switch, list-scheduled per epoch;
* :mod:`.plan` — sub-chunking and the epoch for a collective, reductions by reversal.

Entry points: :func:`solve_scale` (a :class:`~te_ccl.model.problem.Problem` as given, the
signature of every backend) and :func:`compile_scale` (a whole collective → Schedule,
with sub-chunking); :func:`scale_method` says which method fits, for ``--backend auto``.
"""

from te_ccl.backends.scale.entry import solve_scale
from te_ccl.backends.scale.plan import compile_scale, scale_method, scale_plan

__all__ = ["solve_scale", "compile_scale", "scale_method", "scale_plan"]
