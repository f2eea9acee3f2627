"""YAML inputs → validated IR: :func:`load_topology` and :func:`load_collective`.

Every problem with an input raises :class:`~te_ccl.errors.SpecError` (exit code 2)
with one line naming the file (and line), the key and what was expected.
"""

from te_ccl.spec.collective import load_collective, parse_ranks
from te_ccl.spec.topology import load_topology, shipped_dir, shipped_topologies

__all__ = ["load_collective", "load_topology", "parse_ranks", "shipped_dir",
           "shipped_topologies"]
