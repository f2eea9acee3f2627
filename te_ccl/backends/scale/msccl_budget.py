"""How many sub-chunks the MSCCL runtime can still load: its XML reader's element limit.

The runtime's reader keeps at most ``MSCCL.max_elements`` elements for a rank
(:mod:`te_ccl.runtime_limits`, which the lowering also keeps to): the
``<algo>``, every ``<gpu>`` and that rank's thread blocks and steps (the runtime's parser; ``teccl verify``
checks the same limit independently, rule ``xml-node-limit``). Each chunk a GPU receives
or sends is at least one step, so the sub-chunk factor of the scale backend is capped to
keep a lowered algorithm loadable: at 1024 GPUs one rank has ~3,000 elements left for
thread blocks and steps, i.e. one sub-chunk per chunk of an AllGather whose relays are
not fused (a receive and a send each).
"""

from __future__ import annotations

from te_ccl.runtime_limits import MSCCL

__all__ = ["XML_SHARE", "max_subchunks", "room"]

XML_SHARE = 0.9  # of what is left after <algo> and the <gpu>s: the rest is for thread blocks


def max_subchunks(nranks: int, steps_per_k: float, share: float = XML_SHARE) -> int:
    """The largest sub-chunk factor whose ``steps_per_k × k`` steps fit one rank (≥ 1),
    within ``share`` of the elements left (a smaller share for coarser step estimates).

    >>> max_subchunks(1024, 2 * 1023 + 4)  # torus 32×32 AllGather: receive + forward
    1
    >>> max_subchunks(64, 2 * 63 + 4)
    27
    """
    return max(1, int(room(nranks, share) // steps_per_k))


def room(nranks: int, share: float = XML_SHARE) -> float:
    """The steps a rank may hold: ``share`` of the elements left after ``<algo>`` and
    the ``<gpu>``s."""
    return share * (MSCCL.max_elements - nranks - 1)
