"""How many sub-chunks the MSCCL runtime can still load: its XML reader's element limit.

The runtime's reader keeps at most ``MSCCL_MAX_NODES`` elements for a rank: the ``<algo>``,
every ``<gpu>`` and that rank's thread blocks and steps (msccl-xml.md; ``teccl verify``
checks the same limit independently, rule ``xml-node-limit``). Each chunk a GPU receives
or sends is at least one step, so the sub-chunk factor of the scale backend is capped to
keep a lowered algorithm loadable: at 1024 GPUs one rank has ~3,000 elements left for
thread blocks and steps, i.e. at most two sub-chunks per chunk of an AllGather.
"""

from __future__ import annotations

__all__ = ["MSCCL_MAX_NODES", "XML_SHARE", "max_subchunks"]

MSCCL_MAX_NODES = 4096  # the runtime reader's element limit per rank
XML_SHARE = 0.75  # of what is left after <algo> and the <gpu>s: the rest is for thread
# blocks and the nops of extra dependencies (fc8 AlltoAll at 0.9: 4211 elements)


def max_subchunks(nranks: int, steps_per_k: float) -> int:
    """The largest sub-chunk factor whose ``steps_per_k × k`` steps fit one rank (≥ 1).

    >>> max_subchunks(1024, 1023 + 4)  # torus 32×32 AllGather: a chunk from every rank
    2
    >>> max_subchunks(64, 63 + 4)
    45
    """
    room = XML_SHARE * (MSCCL_MAX_NODES - nranks - 1)
    return max(1, int(room // steps_per_k))
