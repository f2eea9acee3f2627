"""What the MSCCL executor can hold: one frozen record, named after the runtime's macros.

The lowering, the verifier, the XML replay and the scale backend's budget all read these
numbers from here, so a file teccl writes is judged by the same limits it was built for.

Buffering: a connection ``(sender, receiver, channel)`` has ``NCCL_STEPS`` slots. Under
the Simple protocol the executor runs each MSCCL step through
``ProtoSimple<MSCCL_CHUNKSTEPS/MSCCL_SLICESTEPS, MSCCL_SLICESTEPS>``, so one step of
``cnt`` 1 occupies ``MSCCL_CHUNKSTEPS = NCCL_STEPS / 2`` slots whatever its size: a
connection holds two outstanding sends. LL and LL128 take one slot a step: eight.

>>> MSCCL.outstanding_sends("Simple"), MSCCL.outstanding_sends("LL128")
(2, 8)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RuntimeLimits", "MSCCL", "PROTOCOLS"]

PROTOCOLS = ("Simple", "LL128", "LL")


@dataclass(frozen=True)
class RuntimeLimits:
    """Limits of the MSCCL executor's XML reader and kernel."""

    max_channels: int = 32           # MAXCHANNELS
    max_peers: int = 32              # send (and receive) thread blocks per channel on one GPU
    max_threadblocks: int = 1024     # MSCCL_MAX_NUM_THREAD_BLOCKS (per GPU)
    max_depid: int = 127             # depid is stored in 8 signed bits
    max_elements: int = 4096         # the XML reader's nodes: <algo>, <gpu>s, one rank's tbs and steps
    nccl_steps: int = 8              # NCCL_STEPS: slots of one connection
    chunk_steps: int = 4             # MSCCL_CHUNKSTEPS = NCCL_STEPS / 2: slots of one Simple step

    def step_slots(self, proto: str, cnt: int = 1) -> int:
        """Slots one sending step of ``cnt`` chunks occupies on its connection."""
        per_call = self.chunk_steps if proto == "Simple" else 1
        return per_call * max(1, cnt)

    def outstanding_sends(self, proto: str, cnt: int = 1) -> int:
        """Sends of ``cnt`` chunks a connection holds before the sender must wait."""
        return max(1, self.nccl_steps // self.step_slots(proto, cnt))


MSCCL = RuntimeLimits()
