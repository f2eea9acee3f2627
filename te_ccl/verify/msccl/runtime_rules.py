"""The checks the runtime's parser applies when it loads a file, in the parser's order.

Mirrors ``mscclGetAlgoFromXmlFile`` (msccl-executor-nccl): proto, coll, then per GPU
``s_chunks``, per thread block the id range and duplicates, the peers and the channel,
per step ``s``, type, buffers, ``cnt``, send/recv without a peer, the per-channel
thread-block limit, offsets, nop dependency chains and ``hasdep``; finally missing
thread block ids. Unlike the runtime it does not stop at the first error, and it checks
every GPU (each rank's runtime checks only its own ``<gpu>``). RCCL's embedded parser
(``src/misc/msccl/msccl_parser.cc`` of ROCm/rccl) makes the same checks in the same
order against its own limits (:data:`te_ccl.runtime_limits.RCCL`).
"""

from __future__ import annotations

from functools import cache

from te_ccl.runtime_limits import MSCCL, PROTOCOLS, RuntimeLimits
from te_ccl.verify.msccl.findings import Finding, Findings, clip, finding
from te_ccl.verify.msccl.kernel import orphan_waits
from te_ccl.verify.msccl.model import BUFFERS, STEP_TYPES, Algo, Gpu, Step, Threadblock

__all__ = ["runtime_checks", "PROTOCOLS", "COLLECTIVES"]

COLLECTIVES = ("reduce", "broadcast", "allreduce", "reducescatter", "allgather", "send", "recv",
               "gather", "scatter", "alltoall", "alltoallv")
# which buffers the parser bounds-checks per type (checkSrc, checkDst)
_CHECKED = {"s": (True, False), "r": (False, True), "rcs": (False, True), "rrs": (True, False),
            "rrc": (False, False), "rrcs": (True, True), "cpy": (True, True), "re": (True, True)}


def runtime_checks(algo: Algo, *, max_steps: int = MSCCL.max_steps,
                   limits: RuntimeLimits = MSCCL) -> Findings:
    """Every violation of the parser's checks of the runtime ``limits`` describe (the
    MSCCL executor's, or RCCL's), GPU by GPU in file order."""
    found = Findings()
    if algo.proto and algo.proto not in PROTOCOLS:
        found.append(finding("proto", f"proto=\"{clip(algo.proto)}\""))
    if algo.coll and algo.coll not in COLLECTIVES:
        found.append(finding("coll", f"coll=\"{clip(algo.coll)}\""))
    for gpu in algo.gpus:
        found += _gpu(gpu, max_steps, limits)
        nodes = 1 + len(algo.gpus) + sum(len(t.steps) + 1 for t in gpu.threadblocks)
        if nodes >= limits.max_elements:
            found.append(finding("xml-node-limit", f"rank {gpu.id} needs {nodes} elements",
                                 gpu=gpu.id, line=gpu.line))
    return found


def _gpu(gpu: Gpu, max_steps: int, limits: RuntimeLimits) -> Findings:
    found = Findings()
    if gpu.s_chunks < 0:
        found.append(finding("scratch-chunks", f"s_chunks={gpu.s_chunks}", gpu=gpu.id,
                             line=gpu.line))
    seen: set[int] = set()
    senders: dict[int, int] = {}
    receivers: dict[int, int] = {}
    for tb in gpu.threadblocks:
        found += _tb_header(gpu, tb, seen, limits)
        found += _tb_steps(gpu, tb, max_steps, senders.get(tb.chan, 0),
                           receivers.get(tb.chan, 0), limits)
        if tb.send >= 0:
            senders[tb.chan] = senders.get(tb.chan, 0) + 1
        if tb.recv >= 0:
            receivers[tb.chan] = receivers.get(tb.chan, 0) + 1
    for i in range(1, max(seen, default=0) + 1):
        if i - 1 not in seen and i in seen:
            found.append(finding("tb-missing", f"thread block {i - 1} is missing (ids go up "
                                 f"to {max(seen)})", gpu=gpu.id, tb=i - 1, line=gpu.line))
    return found


def _tb_header(gpu: Gpu, tb: Threadblock, seen: set[int],
               limits: RuntimeLimits) -> list[Finding]:
    where = {"gpu": gpu.id, "tb": tb.id, "line": tb.line}
    found: list[Finding] = []
    if not 0 <= tb.id < limits.max_threadblocks:
        found.append(finding("tb-id-range", f"thread block id {tb.id} ({limits.name} allows "
                             f"{limits.max_threadblocks} per GPU)", **where))
    elif tb.id in seen:
        found.append(finding("tb-id-duplicate", f"thread block id {tb.id} appears again",
                             **where))
    seen.add(tb.id)
    for role, peer in (("send", tb.send), ("recv", tb.recv)):
        if peer == gpu.id or peer < -1:
            found.append(finding("peer", f"{role}={peer} on gpu {gpu.id}", **where))
    if not 0 <= tb.chan < limits.max_channels:
        found.append(finding("channel-range", f"chan={tb.chan} ({limits.name} allows "
                             f"{limits.max_channels})", **where))
    return found


def _tb_steps(gpu: Gpu, tb: Threadblock, max_steps: int, nsend: int,
              nrecv: int, limits: RuntimeLimits) -> Findings:
    """The step checks of one thread block. Most steps pass all of them, so each step
    is first tested against one condition that holds exactly when none of its checks
    would find anything; only the others go through the checks (:func:`_step`). Steps
    are unpacked: reading a named tuple's fields by name is several times slower."""
    found = Findings()
    orphans = orphan_waits(tb)
    chunks = {buf: gpu.chunks(buf) for buf in BUFFERS}
    usable = _usable(tb, nsend, nrecv, limits.max_peers)
    max_count = limits.max_count
    for step in tb.steps:
        s, kind, srcbuf, srcoff, dstbuf, dstoff, cnt, _, _, hasdep, position, _ = step
        if kind in usable and 0 <= s < max_steps and srcbuf in chunks and dstbuf in chunks:
            if kind == "nop":
                continue
            check_src, check_dst = _CHECKED[kind]
            if (0 <= cnt < max_count and position not in orphans
                    and (hasdep == 0 or hasdep == 1)
                    and (not check_src or -1 <= srcoff < chunks[srcbuf])
                    and (not check_dst or -1 <= dstoff < chunks[dstbuf])):
                continue
        found += _step(gpu, tb, step, max_steps, nsend, nrecv, orphans, limits)
    return found


def _usable(tb: Threadblock, nsend: int, nrecv: int, max_peers: int) -> frozenset[str]:
    """Step types whose peer and per-channel checks pass in this thread block."""
    return _usable_types(tb.send >= 0 and nsend < max_peers,
                         tb.recv >= 0 and nrecv < max_peers)


@cache
def _usable_types(can_send: bool, can_recv: bool) -> frozenset[str]:
    return frozenset(kind for kind, (sends, receives) in STEP_TYPES.items()
                     if (can_send or not sends) and (can_recv or not receives))


def _step(gpu: Gpu, tb: Threadblock, step: Step, max_steps: int, nsend: int, nrecv: int,
          orphans: set[int], limits: RuntimeLimits) -> list[Finding]:
    found: list[Finding] = []
    where = {"gpu": gpu.id, "tb": tb.id, "step": step.position, "line": step.line}
    if not 0 <= step.s < max_steps:
        found.append(finding("step-range", f"s={step.s} (limit {max_steps})", **where))
    if step.type not in STEP_TYPES:
        found.append(finding("step-type", f"type=\"{clip(step.type)}\"", **where))
        return found
    for attr, buf in (("srcbuf", step.srcbuf), ("dstbuf", step.dstbuf)):
        if buf not in BUFFERS:
            found.append(finding("buffer", f"{attr}=\"{clip(buf)}\"", **where))
    if step.type == "nop":
        return found
    found += _transfer(gpu, tb, step, nsend, nrecv, where, limits)
    if step.position in orphans:
        found.append(finding("nop-chain", "nops before this step carry dependencies but "
                             "the step has depid=-1", **where))
    if step.hasdep not in (0, 1):
        found.append(finding("hasdep", f"hasdep={step.hasdep}", **where))
    return found


def _transfer(gpu: Gpu, tb: Threadblock, step: Step, nsend: int, nrecv: int,
              where: dict, limits: RuntimeLimits) -> list[Finding]:
    found: list[Finding] = []
    if not 0 <= step.cnt < limits.max_count:
        found.append(finding("count-range", f"cnt={step.cnt}", **where))
    if step.sends and tb.send < 0:
        found.append(finding("send-without-peer", f"a '{step.type}' step in a thread block "
                             "with send=-1", **where))
    if step.sends and nsend >= limits.max_peers:
        found.append(finding("tbs-per-channel", f"thread block {tb.id} is sending thread block "
                             f"{nsend + 1} on channel {tb.chan}", **where))
    if step.receives and tb.recv < 0:
        found.append(finding("recv-without-peer", f"a '{step.type}' step in a thread block "
                             "with recv=-1", **where))
    if step.receives and nrecv >= limits.max_peers:
        found.append(finding("tbs-per-channel", f"thread block {tb.id} is receiving thread "
                             f"block {nrecv + 1} on channel {tb.chan}", **where))
    check_src, check_dst = _CHECKED[step.type]
    for check, role, buf, off in ((check_src, "src", step.srcbuf, step.srcoff),
                                  (check_dst, "dst", step.dstbuf, step.dstoff)):
        if check and buf in BUFFERS and not -1 <= off < gpu.chunks(buf):
            found.append(finding("offset-range", f"{role}off={off} but {buf}_chunks="
                                 f"{gpu.chunks(buf)}", **where))
    return found
