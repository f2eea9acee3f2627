"""Rules the runtime does not check (docs/verify.md, stage 3), whose violation hangs or corrupts.

``s`` equal to the position, dependency targets that exist and publish a flag,
``depid <= MSCCL.max_depid``, ``chan < nchannels``, peers that are ranks, one thread block per
(chan, send peer) and (chan, recv peer), equal ``cnt`` sequences on both ends of each
connection, ``offset + cnt`` inside the buffer, gpu ids covering ``0..ngpus-1`` once,
at most ``max_steps`` steps per thread block, and a usable in-place/out-of-place flag.
"""

from __future__ import annotations

from collections import Counter

from te_ccl.runtime_limits import MSCCL
from te_ccl.verify.msccl.findings import Finding, Findings, finding
from te_ccl.verify.msccl.model import (
    BUFFERS,
    READS_SRC,
    RECVS,
    SENDS,
    WRITES_DST,
    Algo,
    Gpu,
    Step,
    Threadblock,
)

__all__ = ["static_checks", "Connection", "connections"]

Connection = tuple[int, int, int]  # (sending gpu, receiving gpu, channel)


def static_checks(algo: Algo, *, max_steps: int = MSCCL.max_steps) -> Findings:
    """Violations of the rules the runtime leaves to the file's author."""
    found = _gpu_ids(algo)
    if not algo.inplace and not algo.outofplace:
        found.append(finding("inplace-flags", "inplace=0 and outofplace=0: the runtime never "
                             "selects this algorithm"))
    for gpu in algo.gpus:
        found += _steps(algo, gpu, max_steps)
        found += _peers(algo, gpu)
    found += _sequences(algo)
    return found


def _gpu_ids(algo: Algo) -> Findings:
    found = Findings()
    counts = Counter(g.id for g in algo.gpus)
    for g in algo.gpus:
        if not 0 <= g.id < algo.ngpus:
            found.append(finding("gpu-ids", f"gpu id {g.id} is not a rank (ngpus={algo.ngpus})",
                                 gpu=g.id, line=g.line))
    for gid, n in sorted(counts.items()):
        if n > 1:
            found.append(finding("gpu-ids", f"gpu {gid} appears {n} times", gpu=gid))
    missing = [r for r in range(algo.ngpus) if r not in counts]
    if missing:
        found.append(finding("gpu-ids", f"no <gpu> for rank(s) {_ranges(missing)}"))
    return found


def _steps(algo: Algo, gpu: Gpu, max_steps: int) -> Findings:
    """The per-step rules. Each step is first tested against one condition that holds
    exactly when none of them finds anything; only the others are checked (:func:`_step`).
    Steps are unpacked: reading a named tuple's fields by name is several times slower."""
    found = Findings()
    tbs = {t.id: t for t in gpu.threadblocks}
    steps_of = {t.id: t.steps for t in gpu.threadblocks}
    chunks = {buf: gpu.chunks(buf) for buf in BUFFERS}
    max_depid = MSCCL.max_depid
    for tb in gpu.threadblocks:
        if len(tb.steps) > max_steps:
            found.append(finding("max-steps", f"{len(tb.steps)} steps (limit {max_steps})",
                                 gpu=gpu.id, tb=tb.id, line=tb.line))
        for st in tb.steps:
            s, kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, _, position, _ = st
            if s == position and depid <= max_depid:
                if depid >= 0:
                    target = steps_of.get(depid)
                    clean = (target is not None and 0 <= deps < len(target)
                             and target[deps].type != "nop" and target[deps].hasdep == 1)
                else:
                    clean = kind != "nop"
                if clean and kind != "nop":
                    if kind in READS_SRC and srcbuf in chunks:
                        clean = 0 <= srcoff and srcoff + cnt <= chunks[srcbuf]
                    if clean and kind in WRITES_DST and dstbuf in chunks:
                        clean = 0 <= dstoff and dstoff + cnt <= chunks[dstbuf]
                if clean:
                    continue
            found += _step(gpu, tbs, tb, st)
    return found


def _step(gpu: Gpu, tbs: dict[int, Threadblock], tb: Threadblock, st: Step) -> list[Finding]:
    found: list[Finding] = []
    where = {"gpu": gpu.id, "tb": tb.id, "step": st.position, "line": st.line}
    if st.s != st.position:
        found.append(finding("step-position", f"s={st.s} at position {st.position}", **where))
    if st.type == "nop" and st.depid < 0:
        found.append(finding("nop-dependency", "nop with depid=-1", **where))
    if st.depid > MSCCL.max_depid:
        found.append(finding("depid-range", f"depid={st.depid}", **where))
    elif st.depid >= 0:
        found += _dependency(tbs, st.depid, st.deps, where)
    if st.type != "nop":
        found += _bounds(gpu, st, where)
    return found


def _dependency(tbs: dict[int, Threadblock], depid: int, deps: int,
                where: dict) -> list[Finding]:
    target = tbs.get(depid)
    if target is None:
        return [finding("dependency-target", f"depid={depid}: no such thread block", **where)]
    if not 0 <= deps < len(target.steps):
        return [finding("dependency-target", f"deps={deps}: thread block {depid} has "
                        f"{len(target.steps)} steps", **where)]
    step = target.steps[deps]
    if step.type == "nop":
        return [finding("dependency-flag", f"waits on tb {depid} step {deps}, a nop (nops "
                        "never publish)", **where)]
    if step.hasdep != 1:
        return [finding("dependency-flag", f"waits on tb {depid} step {deps}, which has "
                        f"hasdep={step.hasdep}", **where)]
    return []


def _bounds(gpu: Gpu, st: Step, where: dict) -> list[Finding]:
    found = []
    uses = (("src", st.srcbuf, st.srcoff, st.type in READS_SRC),
            ("dst", st.dstbuf, st.dstoff, st.type in WRITES_DST))
    for role, buf, off, used in uses:
        if used and buf in BUFFERS and not (0 <= off and off + st.cnt <= gpu.chunks(buf)):
            found.append(finding("offset-bounds", f"{role} {buf}[{off}..{off + st.cnt}) but "
                                 f"{buf}_chunks={gpu.chunks(buf)}", **where))
    return found


def _peers(algo: Algo, gpu: Gpu) -> Findings:
    found = Findings()
    owners: dict[tuple[str, int, int], int] = {}
    per_channel: Counter[tuple[str, int]] = Counter()
    for tb in gpu.threadblocks:
        where = {"gpu": gpu.id, "tb": tb.id, "line": tb.line}
        for role, peer, kinds in (("send", tb.send, SENDS), ("recv", tb.recv, RECVS)):
            per_channel[(role, tb.chan)] += peer >= 0
            # a thread block with such steps is reported by the parser's checks
            if (peer >= 0 and per_channel[(role, tb.chan)] > MSCCL.max_peers
                    and not any(st.type in kinds for st in tb.steps)):
                found.append(finding("tbs-per-channel", f"thread block {tb.id} is {role} thread "
                                     f"block {per_channel[(role, tb.chan)]} on channel "
                                     f"{tb.chan}", **where))
        if tb.chan >= algo.nchannels:
            found.append(finding("channel-count", f"chan={tb.chan} but nchannels="
                                 f"{algo.nchannels}", **where))
        for role, peer in (("send", tb.send), ("recv", tb.recv)):
            if peer >= algo.ngpus:
                found.append(finding("peer", f"{role}={peer} is not a rank (ngpus="
                                     f"{algo.ngpus})", **where))
            if peer < 0:
                continue
            other = owners.setdefault((role, tb.chan, peer), tb.id)
            if other != tb.id:
                found.append(finding("connection-unique", f"{role} peer {peer} on channel "
                                     f"{tb.chan} already belongs to tb {other}", **where))
    return found


def connections(algo: Algo) -> tuple[dict[Connection, tuple[int, int]],
                                     dict[Connection, tuple[int, int]]]:
    """(sender side, receiver side): connection -> (gpu, tb id), first owner only."""
    send: dict[Connection, tuple[int, int]] = {}
    recv: dict[Connection, tuple[int, int]] = {}
    for gpu in algo.gpus:
        for tb in gpu.threadblocks:
            if tb.send >= 0:
                send.setdefault((gpu.id, tb.send, tb.chan), (gpu.id, tb.id))
            if tb.recv >= 0:
                recv.setdefault((tb.recv, gpu.id, tb.chan), (gpu.id, tb.id))
    return send, recv


def _sequences(algo: Algo) -> Findings:
    """Equal cnt sequences on both ends of every connection (sender's sends, receiver's recvs)."""
    send, recv = connections(algo)
    tbs = {(g.id, t.id): t for g in algo.gpus for t in g.threadblocks}
    found = Findings()
    for conn in sorted(set(send) | set(recv)):
        src, dst, chan = conn
        s_steps = [s for s in tbs[send[conn]].steps if s.type in SENDS] if conn in send else []
        r_steps = [s for s in tbs[recv[conn]].steps if s.type in RECVS] if conn in recv else []
        if [s.cnt for s in s_steps] == [s.cnt for s in r_steps]:
            continue
        for k in range(max(len(s_steps), len(r_steps))):
            a = s_steps[k] if k < len(s_steps) else None
            b = r_steps[k] if k < len(r_steps) else None
            if a is not None and b is not None and a.cnt == b.cnt:
                continue
            side, st = (send[conn], a) if a is not None else (recv[conn], b)
            if a is None:
                detail = f"receive #{k + 1} from gpu {src} on channel {chan} has no matching send"
            elif b is None:
                detail = f"send #{k + 1} to gpu {dst} on channel {chan} is never received"
            else:
                detail = (f"send #{k + 1} to gpu {dst} on channel {chan} has cnt={a.cnt} but "
                          f"the receive (tb {recv[conn][1]} step {b.position}) has cnt={b.cnt}")
            found.append(finding("connection-sequence", detail, gpu=side[0], tb=side[1],
                                 step=st.position, line=st.line))
            break
    return found


def _ranges(values: list[int]) -> str:
    return ", ".join(str(v) for v in values[:8]) + (" ..." if len(values) > 8 else "")
