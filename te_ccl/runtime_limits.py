"""What the MSCCL executor can hold: one frozen record, named after the runtime's macros.

The lowering, the verifier, the XML replay and the scale backend's budget all read these
numbers from here, so a file teccl writes is judged by the same limits it was built for.

Buffering, as the executor's kernel (``msccl_kernel.cu``, ``prims_simple.h``,
``prims_ll.h``, ``msccl_setup.cc`` of msccl-executor-nccl) runs it:

* A connection ``(sender, receiver, channel)`` is a ring of ``NCCL_STEPS`` slots with one
  sending and one receiving thread block.
* A step of ``cnt`` chunks is run as ``ceil(cnt / maxAllowedCount)`` primitive calls, one
  after the other. ``maxAllowedCount = max(1, chunkEffectiveSize / chunk bytes)`` (capped
  below ``MSCCL_MAX_COUNT``) depends on the message size: it is 1 once one MSCCL chunk
  exceeds half a Simple connection buffer (1 MiB at the default 4 MiB ``NCCL_BUFFSIZE``),
  so for large messages every chunk of the step is its own call. ``step_slots`` and
  ``outstanding_sends`` take this worst case; a file's ``maxBytes`` can bound it
  (``max_allowed_count``).
* Under Simple every call is ``ProtoSimple<MSCCL_CHUNKSTEPS/MSCCL_SLICESTEPS,
  MSCCL_SLICESTEPS>``: two slices of ``MSCCL_SLICESTEPS`` slots, i.e. ``MSCCL_CHUNKSTEPS
  = NCCL_STEPS / 2`` slots whatever its size (an empty slice still advances the step
  counter). A connection holds two calls. Under LL and LL128 a call takes one slot: eight.
* A sender waits per call (per slice) for free slots, so a step whose calls need more
  slots than the connection has does not fail: it streams, and completes only while the
  receiver drains it.

>>> MSCCL.outstanding_sends("Simple"), MSCCL.outstanding_sends("LL128")
(2, 8)
>>> MSCCL.step_slots("Simple", 3), MSCCL.outstanding_sends("Simple", 3)
(12, 0)
>>> MSCCL.max_allowed_count("Simple", 8 << 20, 8), MSCCL.max_allowed_count("Simple", 16 << 20, 8)
(2, 1)

RCCL (ROCm/rccl, ``src/misc/msccl/msccl_parser.cc``, ``src/include/msccl/msccl_struct.h``,
``src/include/device.h``) embeds the same parser and kernel with other limits: 64 thread
blocks per GPU (``MSCCL_MAX_NUM_THREAD_BLOCKS``), 128 channels (``MAXCHANNELS``), and
smaller LL and LL128 buffers (256 threads per block; LL128 lines of 64 bytes, 7 of
their 8 words data). Steps, counts, peers per channel, reduce fusion, XML elements,
attributes, protocols, collectives and the slots of a connection are the same.
``teccl compile --runtime rccl`` lowers within RCCL's limits, ``teccl verify --runtime
rccl`` checks them.

>>> RCCL.max_allowed_count("LL128", 1 << 20, 8), MSCCL.max_allowed_count("LL128", 1 << 20, 8)
(1, 4)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RuntimeLimits", "MSCCL", "RCCL", "RUNTIMES", "PROTOCOLS"]

PROTOCOLS = ("Simple", "LL128", "LL")


@dataclass(frozen=True)
class RuntimeLimits:
    """Limits of an MSCCL executor's XML reader and kernel (by default msccl-executor-nccl's)."""

    name: str = "msccl"
    max_channels: int = 32           # MAXCHANNELS
    max_peers: int = 32              # MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL (per direction)
    max_threadblocks: int = 1024     # MSCCL_MAX_NUM_THREAD_BLOCKS (per GPU)
    max_steps: int = 64              # MSCCL_MAX_NUM_STEPS (the default build's)
    max_depid: int = 127             # depid is stored in 8 signed bits
    max_elements: int = 4096         # MSCCL_MAX_NODES: <algo>, <gpu>s, one rank's tbs and steps
    max_count: int = 72              # MSCCL_MAX_COUNT: cnt must be below it
    max_reduce_fusion: int = 16      # MSCCL_MAX_REDUCE_FUSION: sources of one fused reduction
    nccl_steps: int = 8              # NCCL_STEPS: slots of one connection
    chunk_steps: int = 4             # MSCCL_CHUNKSTEPS = NCCL_STEPS / 2: slots of one Simple call
    slice_steps: int = 2             # MSCCL_SLICESTEPS = NCCL_STEPS / 4: slots of one slice
    buffsize_simple: int = 1 << 22   # DEFAULT_BUFFSIZE (NCCL_BUFFSIZE): one Simple connection
    buffsize_ll: int = 8 * 512 * 8 * 16        # DEFAULT_LL_BUFFSIZE
    buffsize_ll128: int = 120 * 640 * 8 * 8    # DEFAULT_LL128_BUFFSIZE
    ll128_line_elems: int = 16       # NCCL_LL128_LINEELEMS: 8-byte words of an LL128 line

    @property
    def waitable(self) -> int:
        """Thread blocks of one GPU that a step can wait for: the ``depid`` values
        0..``max_depid``."""
        return self.max_depid + 1

    def step_room(self, nranks: int) -> int:
        """Steps one rank's ``<gpu>`` can hold in a file of ``nranks`` ranks: the reader's
        elements less the ``<algo>``, the ``<gpu>``s and one thread block."""
        return self.max_elements - nranks - 2

    def call_slots(self, proto: str) -> int:
        """Slots one primitive call occupies (Simple: a chunk of two slices; LL/LL128: one).
        An unknown protocol is judged as Simple, the deepest."""
        return 1 if proto in ("LL", "LL128") else self.chunk_steps

    def call_bytes(self, proto: str) -> int:
        """Data bytes one primitive call carries at most (``chunkEffectiveSize``, default
        buffer sizes): a Simple call's slots, an LL or LL128 slot less its flags."""
        if proto == "LL":
            return self.buffsize_ll // self.nccl_steps // 2
        if proto == "LL128":
            line = self.ll128_line_elems  # one word of each line is the flag
            return self.buffsize_ll128 // self.nccl_steps // line * (line - 1)
        return self.buffsize_simple // self.nccl_steps * self.chunk_steps

    def slice_bytes(self, proto: str) -> int:
        """Data bytes a connection hands the link at a time: a Simple call goes out as
        slices of ``slice_steps`` slots (the network proxy posts one send per slice), an
        LL or LL128 call as one slot."""
        if proto in ("LL", "LL128"):
            return self.call_bytes(proto)
        return self.call_bytes(proto) * self.slice_steps // self.chunk_steps

    def max_allowed_count(self, proto: str, nbytes: int, nchunksperloop: int) -> int:
        """``maxAllowedCount`` for a message of ``nbytes`` (``msccl_setup.cc``, default
        buffer sizes): chunks one primitive call may carry."""
        chunk = -(-max(1, nbytes) // max(1, nchunksperloop))
        return min(self.max_count - 1, max(1, self.call_bytes(proto) // chunk))

    def step_calls(self, cnt: int, max_allowed_count: int = 1) -> int:
        """Primitive calls of one step of ``cnt`` chunks; for large messages
        (``maxAllowedCount`` 1) one per chunk. A step of ``cnt`` 0 makes none."""
        return -(-max(0, cnt) // max_allowed_count)

    def step_slots(self, proto: str, cnt: int = 1, max_allowed_count: int = 1) -> int:
        """Slots one sending step of ``cnt`` chunks occupies on its connection, in total
        (its calls take them one after the other)."""
        return self.call_slots(proto) * self.step_calls(cnt, max_allowed_count)

    def outstanding_sends(self, proto: str, cnt: int = 1, max_allowed_count: int = 1) -> int:
        """Whole sends of ``cnt`` chunks a connection holds before the sender must wait
        (``max_allowed_count`` chunks a call, default the large messages' 1); 0 when one
        such send needs more slots than the connection has (it completes only as the
        receiver drains it)."""
        return self.nccl_steps // max(1, self.step_slots(proto, cnt, max_allowed_count))


MSCCL = RuntimeLimits()
RCCL = RuntimeLimits(name="rccl", max_channels=128, max_threadblocks=64,
                     buffsize_ll=8 * 256 * 8 * 16, buffsize_ll128=28 * 256 * 8 * 8,
                     ll128_line_elems=8)
RUNTIMES = {r.name: r for r in (MSCCL, RCCL)}  # teccl verify --runtime
