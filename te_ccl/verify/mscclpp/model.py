"""An MSCCL++ execution plan read into plain objects, with every structural error found.

Read from the JSON alone, as the executor's parser reads it (``execution_plan.cc``): a
channel an op names is an index into its thread block's channels of the op's type, which
index the GPU's channels of that type (flattened over the ``connected_to`` lists); a
``buffer_id`` indexes the block's remote buffers of the op's channel type, which index
the GPU's ``remote_buffers``; a ``switch_channel_id`` indexes the block's switch channels,
which index the GPU's NVLS groups. The k-th channel of one type a rank declares to a
peer is connected to the k-th the peer declares back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Ref", "Op", "Block", "Gpu", "Plan", "read_plan", "LIMITS", "OP_NAMES", "SIGNALS",
           "WAITS"]

# the executor's limits (execution_common.hpp)
LIMITS = {"ops": 64, "channels": 16, "channels_per_op": 8, "semaphores_per_op": 16}
OP_NAMES = frozenset({
    "nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re",
    "res", "rre", "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt",
    "recspkt", "glres", "gstore", "gstorepkt", "rlxsignal", "rlxwait", "pipeline",
    "sem_acquire", "sem_release"})
SIGNALS = frozenset({"signal", "rlxsignal", "pws", "pwsf"})  # ops that signal their channels
WAITS = frozenset({"wait", "rlxwait"})
# ops every thread of a block works on (a signal, wait or semaphore op runs on one thread)
DATA_OPS = frozenset({"put", "pws", "pwsf", "get", "copy", "re", "res", "rre", "rres", "glres",
                      "gstore", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt",
                      "recspkt", "gstorepkt"})
BUFFERS = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch", "none")


@dataclass(frozen=True)
class Ref:
    """A buffer range an op reads or writes: ``rank``'s buffer ``buf`` (local or remote),
    or ``group`` (the ranks of an NVLS group) for a switch channel; chunks ``index`` to
    ``index + size``, the ``part``-th of ``parts`` equal slices (thread-block groups)."""

    rank: int
    buf: str
    index: int
    size: int
    part: int = 0
    parts: int = 1
    group: tuple[int, ...] = ()
    remote: bool = False


@dataclass
class Op:
    gpu: int
    block: int
    pos: int
    name: str
    channel_type: str = "none"
    peers: list[int] = field(default_factory=list)  # one per channel id: (peer, k-th)
    pairs: list[tuple[int, int]] = field(default_factory=list)  # the channels' (peer, k)
    src: list[Ref] = field(default_factory=list)
    dst: list[Ref] = field(default_factory=list)
    semaphores: list[int] = field(default_factory=list)
    barrier: tuple[int, int] | None = None  # (id, thread blocks)
    inner: list[Op] = field(default_factory=list)

    def where(self) -> str:
        return f"rank {self.gpu} block {self.block} op {self.pos} ({self.name})"

    def packet_reads(self) -> list[Ref]:
        """The refs an LL op reads as packets (it waits for each packet's flag)."""
        if self.name in ("upkt", "rppkt"):
            return self.src[:1]
        if self.name in ("repkt", "respkt", "recpkt", "recspkt"):
            return self.src[1:]
        return []


@dataclass
class Block:
    id: int
    ops: list[Op]


@dataclass
class Gpu:
    id: int
    chunks: dict[str, int]
    blocks: list[Block]
    semaphores: list[int]
    channels: dict[str, list[tuple[int, int]]]  # type → (peer, k-th to that peer)
    groups: list[tuple[str, tuple[int, ...]]]  # NVLS: (buffer, ranks)
    remote: list[tuple[int, str, tuple[str, ...]]] = field(default_factory=list)


@dataclass
class Plan:
    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: list[Gpu]
    tbg_parts: int  # the least common multiple of the thread-block group sizes


class _Reader:
    def __init__(self, errors: list[str]) -> None:
        self.errors = errors

    def items(self, obj: Any, key: str, where: str) -> list[Any]:
        """``obj[key]`` as a list of objects (absent: empty); what is not is an error."""
        value = obj.get(key, []) if isinstance(obj, dict) else []
        if value is None:
            return []
        if not isinstance(value, list):
            self.errors.append(f"{where}: {key!r} is not a list")
            return []
        return value

    def objects(self, obj: Any, key: str, where: str) -> list[dict]:
        out = []
        for i, x in enumerate(self.items(obj, key, where)):
            if isinstance(x, dict):
                out.append(x)
            else:
                self.errors.append(f"{where}: {key}[{i}] is not an object")
        return out

    def need(self, obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            self.errors.append(f"{where}: missing key {key!r}")
            return None
        value = obj[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.errors.append(f"{where}: {key!r} has the wrong type "
                               f"({type(value).__name__})")
            return None
        return value


def read_plan(data: Any, errors: list[str]) -> Plan | None:
    """The plan, or None where its structure is too broken to run; ``errors`` receives
    every structural error found."""
    r = _Reader(errors)
    if not isinstance(data, dict):
        errors.append("plan: expected a JSON object")
        return None
    name = r.need(data, "name", str, "plan")
    coll = r.need(data, "collective", str, "plan")
    proto = r.need(data, "protocol", str, "plan")
    inplace = r.need(data, "inplace", bool, "plan")
    gpus = r.need(data, "gpus", list, "plan")
    if proto is not None and proto not in ("Simple", "LL"):
        errors.append(f"plan: protocol {proto!r} is neither Simple nor LL")
    if None in (name, coll, proto, inplace, gpus):
        return None
    raw = []
    for i, g in enumerate(gpus):
        gid = r.need(g, "id", int, f"gpus[{i}]")
        if gid is not None and gid != i:
            errors.append(f"gpus[{i}]: id {gid} (the executor reads gpus[rank] and wants id == rank)")
        raw.append(g if isinstance(g, dict) else {})
    n = len(raw)
    if not n:
        errors.append("plan: 'gpus' is empty; expected one entry per rank")
    if errors:  # no rank is where the executor looks for it: reading on would list each op
        return None
    shells = [_gpu_shell(r, g, i, n) for i, g in enumerate(raw)]
    if any(s is None for s in shells):
        return None
    parts = [1]
    plan = Plan(name, coll, proto, inplace, shells, 1)
    for i, g in enumerate(raw):
        _blocks(r, g, plan, i, parts)
    for p in parts:
        plan.tbg_parts = plan.tbg_parts * p // _gcd(plan.tbg_parts, p)
    _check_pairing(plan, errors)
    return plan


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _gpu_shell(r: _Reader, g: dict, i: int, n: int) -> Gpu | None:
    where = f"rank {i}"
    chunks = {}
    for key, buf in (("input_chunks", "i"), ("output_chunks", "o"), ("scratch_chunks", "s")):
        v = r.need(g, key, int, where)
        if v is not None and v < 0:
            r.errors.append(f"{where}: {key} {v} is negative")
        if v is None or v < 0:
            return None
        chunks[buf] = v
    channels: dict[str, list[tuple[int, int]]] = {"memory": [], "port": []}
    groups: list[tuple[str, tuple[int, ...]]] = []
    for c in r.objects(g, "channels", where):
        ctype = r.need(c, "channel_type", str, f"{where} channels")
        if ctype in ("memory", "port"):
            seen = channels[ctype]
            for peer in r.items(c, "connected_to", f"{where} channels"):
                if not isinstance(peer, int) or not 0 <= peer < n or peer == i:
                    r.errors.append(f"{where}: {ctype} channel to {peer!r}, not another rank")
                    continue
                seen.append((peer, sum(1 for p, _ in seen if p == peer)))
        elif ctype == "switch":
            buf = r.need(c, "buffer_type", str, f"{where} switch channel")
            for grp in r.objects(c, "rank_groups", f"{where} switch channel"):
                ranks = tuple(r.items(grp, "ranks", f"{where} rank group"))
                if i not in ranks or any(not isinstance(x, int) or isinstance(x, bool)
                                         or not 0 <= x < n for x in ranks):
                    r.errors.append(f"{where}: NVLS group {list(ranks)} must list valid ranks "
                                    "including this one")
                    continue
                if buf not in BUFFERS:
                    r.errors.append(f"{where}: switch channel buffer_type {buf!r}")
                groups.append((buf, ranks))
        elif ctype is not None:
            r.errors.append(f"{where}: unknown channel_type {ctype!r}")
    sems = []
    for s in r.objects(g, "semaphores", where):
        v = r.need(s, "init_value", int, f"{where} semaphores")
        if v is not None and v < 0:
            r.errors.append(f"{where}: semaphore init_value {v} is negative")
        sems.append(max(v or 0, 0))
    gpu = Gpu(i, chunks, [], sems, channels, groups)
    for j, b in enumerate(r.objects(g, "remote_buffers", where)):
        rank = r.need(b, "rank", int, f"{where} remote_buffers[{j}]")
        buf = r.need(b, "type", str, f"{where} remote_buffers[{j}]")
        access = r.items(b, "access_channel_types", f"{where} remote_buffers[{j}]")
        if rank is None or not 0 <= rank < n or buf not in BUFFERS:
            r.errors.append(f"{where}: remote_buffers[{j}] names rank {rank!r} buffer {buf!r}")
            rank, buf = 0, "s"
        gpu.remote.append((rank, buf, tuple(access)))
    return gpu


def _blocks(r: _Reader, g: dict, plan: Plan, i: int, parts: list[int]) -> None:
    gpu = plan.gpus[i]
    for j, tb in enumerate(r.objects(g, "threadblocks", f"rank {i}")):
        where = f"rank {i} block {j}"
        tid = r.need(tb, "id", int, where)
        if tid is not None and tid != j:
            r.errors.append(f"{where}: id {tid} (blocks are listed in id order)")
        chans: dict[str, list[int]] = {"memory": [], "port": [], "switch": []}
        for c in r.objects(tb, "channels", where):
            ctype = r.need(c, "channel_type", str, where)
            ids = r.items(c, "channel_ids", where)
            limit = len(gpu.groups) if ctype == "switch" else len(gpu.channels.get(ctype, []))
            for x in ids:
                if ctype not in chans or not isinstance(x, int) or not 0 <= x < limit:
                    r.errors.append(f"{where}: {ctype} channel id {x!r} out of range (rank "
                                    f"{i} declares {limit})")
                else:
                    chans[ctype].append(x)
        refs: dict[str, list[int]] = {"memory": [], "port": []}
        for ref in r.objects(tb, "remote_buffer_refs", where):
            ctype = r.need(ref, "access_channel_type", str, where)
            for x in r.items(ref, "remote_buffer_ids", where):
                ok = ctype in refs and isinstance(x, int) and 0 <= x < len(gpu.remote)
                if ok and ctype not in gpu.remote[x][2]:
                    r.errors.append(f"{where}: remote buffer {x} is not accessible by {ctype}")
                if ok:
                    refs[ctype].append(x)
                else:
                    r.errors.append(f"{where}: remote buffer id {x!r} out of range")
        for ctype, ids in chans.items():
            if len(ids) > LIMITS["channels"] or len(refs.get(ctype, ())) > LIMITS["channels"]:
                r.errors.append(f"{where}: more than {LIMITS['channels']} {ctype} channels or "
                                "remote buffers (the executor holds 16 per block)")
        listed = tb.get("ops") if isinstance(tb, dict) else None
        if isinstance(listed, list) and len(listed) > LIMITS["ops"]:  # not read one by one
            r.errors.append(f"{where}: {len(listed)} operations, the executor holds "
                            f"{LIMITS['ops']}")
            gpu.blocks.append(Block(j, []))
            continue
        ops = []
        for op in r.objects(tb, "ops", where):
            ops.append(_op(r, op, plan, gpu, j, len(ops), chans, refs, parts))
        count = sum(1 + len(o.inner) for o in ops)
        if count > LIMITS["ops"]:
            r.errors.append(f"{where}: {count} operations, the executor holds {LIMITS['ops']}")
        _check_nops(ops, r.errors)
        gpu.blocks.append(Block(j, ops))


def _check_nops(ops: list[Op], errors: list[str]) -> None:
    """A signal or release goes out from one thread, a wait or acquire is seen by one: a
    ``nop`` (``__syncthreads``) must separate them from the data ops the whole block runs,
    or the signal can pass writes still under way and the data op can start before the
    wait returned."""
    data = waited = None
    for op in (x for o in ops for x in (o.inner if o.name == "pipeline" else [o])):
        if op.name in ("nop", "barrier"):
            data = waited = None
            continue
        if data and (op.name in SIGNALS or op.name == "sem_release"):
            errors.append(f"{op.where()}: signals after {data.where()} with no nop between "
                          "(the block's other threads may still be writing)")
        if waited and op.name in DATA_OPS:
            errors.append(f"{op.where()}: follows {waited.where()} with no nop between "
                          "(only one thread waited)")
        if op.name in DATA_OPS:
            data = op
        if op.name in WAITS or op.name == "sem_acquire":
            waited = op


def _op(r: _Reader, raw: Any, plan: Plan, gpu: Gpu, block: int, pos: int,
        chans: dict[str, list[int]], refs: dict[str, list[int]], parts: list[int]) -> Op:
    name = r.need(raw, "name", str, f"rank {gpu.id} block {block} op {pos}") or "nop"
    op = Op(gpu.id, block, pos, name)
    where = op.where()
    if name not in OP_NAMES:
        r.errors.append(f"{where}: unknown operation")
        op.name = "nop"
        return op
    op.channel_type = raw.get("channel_type", "none")
    if not isinstance(op.channel_type, str) or op.channel_type not in CHANNEL_TYPES:
        r.errors.append(f"{where}: unknown channel_type {op.channel_type!r}")
        op.channel_type = "none"
    tbg = raw.get("tbg_info")
    part, nparts = (tbg.get("tb_id", 0), tbg.get("tbg_size", 1)) if isinstance(tbg, dict) else (0, 1)
    if not (isinstance(nparts, int) and nparts >= 1 and isinstance(part, int) and 0 <= part < nparts):
        r.errors.append(f"{where}: tbg_info {tbg!r}")
        part, nparts = 0, 1
    parts.append(nparts)
    ids = r.items(raw, "channel_ids", where)
    if len(ids) > LIMITS["channels_per_op"]:
        r.errors.append(f"{where}: {len(ids)} channels, at most {LIMITS['channels_per_op']}")
    for x in ids:
        mine = chans.get(op.channel_type, [])
        if not isinstance(x, int) or not 0 <= x < len(mine):
            r.errors.append(f"{where}: channel id {x!r} out of range (block has {len(mine)} "
                            f"{op.channel_type} channels)")
            continue
        if op.channel_type in ("memory", "port"):
            op.pairs.append(gpu.channels[op.channel_type][mine[x]])
    for key, out in (("src_buff", op.src), ("dst_buff", op.dst)):
        listed = r.objects(raw, key, where)
        if len(listed) > LIMITS["channels_per_op"]:  # inputBufferRefs, outputBufferRefs
            r.errors.append(f"{where}: {len(listed)} {key} entries, at most "
                            f"{LIMITS['channels_per_op']}")
        for b in listed:
            ref = _ref(r, b, plan, gpu, op, chans, refs, part, nparts, key)
            if ref is not None:
                out.append(ref)
    sems = r.items(raw, "semaphore_ids", where)
    for x in sems:
        if not isinstance(x, int) or not 0 <= x < len(gpu.semaphores):
            r.errors.append(f"{where}: semaphore {x!r} out of range ({len(gpu.semaphores)} declared)")
        else:
            op.semaphores.append(x)
    if len(sems) > LIMITS["semaphores_per_op"]:
        r.errors.append(f"{where}: {len(sems)} semaphores, at most {LIMITS['semaphores_per_op']}")
    if name == "barrier":
        bid, n = raw.get("barrier_id", 0), raw.get("num_threadblocks", 0)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (bid, n)):
            r.errors.append(f"{where}: barrier_id {bid!r} num_threadblocks {n!r}")
        else:
            op.barrier = (bid, n)
    if name == "pipeline":
        for inner in r.objects(raw, "ops", where):
            op.inner.append(_op(r, inner, plan, gpu, block, pos, chans, refs, parts))
    if op.channel_type in ("memory", "port") and op.pairs:
        for ref, pair in zip([x for x in op.dst + op.src if x.remote], op.pairs, strict=False):
            if ref.rank != pair[0]:
                r.errors.append(f"{where}: channel to rank {pair[0]} used for a buffer of "
                                f"rank {ref.rank}")
    if name in ("signal", "wait", "rlxsignal", "rlxwait", "flush") and not op.pairs:
        r.errors.append(f"{where}: names no channel")
    if name == "get" and any(a.index != b.index for a, b in zip(op.src, op.dst, strict=False)):
        r.errors.append(f"{where}: the executor's get reads the peer at the destination's "
                        "offset and writes at the source's (handleGet): give both one index")
    return op


def _ref(r: _Reader, b: Any, plan: Plan, gpu: Gpu, op: Op, chans: dict[str, list[int]],
         refs: dict[str, list[int]], part: int, nparts: int, key: str) -> Ref | None:
    where = f"{op.where()} {key}"
    index = r.need(b, "index", int, where)
    size = r.need(b, "size", int, where)
    if index is None or size is None or index < 0 or size < 1:
        r.errors.append(f"{where}: index {index!r} size {size!r}")
        return None
    if "switch_channel_id" in b:
        x = b["switch_channel_id"]
        mine = chans["switch"]
        if not isinstance(x, int) or not 0 <= x < len(mine):
            r.errors.append(f"{where}: switch channel {x!r} out of range")
            return None
        buf, group = gpu.groups[mine[x]]
        if buf not in BUFFERS:
            return None
        ref = Ref(gpu.id, buf, index, size, part, nparts, group=group, remote=False)
        holders = [plan.gpus[m] for m in group if m < len(plan.gpus)]
    elif "buffer_id" in b:
        x = b["buffer_id"]
        mine = refs.get(op.channel_type, [])
        if not isinstance(x, int) or not 0 <= x < len(mine):
            r.errors.append(f"{where}: buffer_id {x!r} out of range (block has {len(mine)} "
                            f"{op.channel_type} remote buffers)")
            return None
        rank, buf, _ = gpu.remote[mine[x]]
        ref = Ref(rank, buf, index, size, part, nparts, remote=True)
        holders = [plan.gpus[rank]]
    else:
        buf = b.get("type")
        if buf not in BUFFERS:
            r.errors.append(f"{where}: buffer type {buf!r}")
            return None
        ref = Ref(gpu.id, buf, index, size, part, nparts)
        holders = [gpu]
    for h in holders:
        if index + size > h.chunks[ref.buf]:
            r.errors.append(f"{where}: chunks {index}..{index + size - 1} of rank {h.id}'s "
                            f"{ref.buf!r} buffer, which has {h.chunks[ref.buf]}")
            return None
    return ref


def _check_pairing(plan: Plan, errors: list[str]) -> None:
    """Channels pair k-th to k-th per type, which the executor's connection tags (counted
    per peer over memory channels, then port channels) keep only while both sides declare
    as many memory channels to each other, or neither declares port channels. A channel
    declared on one side only is allowed (the executor connects it); a signal on it that
    nobody waits for, or a wait nobody signals, is found by running the plan. Every
    member of an NVLS group declares the group."""
    pairs = {tuple(sorted((g.id, p))) for g in plan.gpus
             for chans in g.channels.values() for p, _ in chans}
    for a, b in sorted(pairs):
        ca, cb = plan.gpus[a].channels, plan.gpus[b].channels
        mem = (sum(1 for p, _ in ca["memory"] if p == b), sum(1 for p, _ in cb["memory"] if p == a))
        ports = any(p == b for p, _ in ca["port"]) or any(p == a for p, _ in cb["port"])
        if mem[0] != mem[1] and ports:
            errors.append(f"ranks {a} and {b} declare {mem[0]} and {mem[1]} memory channels "
                          "to each other and port channels too: the executor's connection "
                          "tags would pair a memory channel with a port channel")
    for g in plan.gpus:
        for buf, ranks in g.groups:
            for m in ranks:
                if m < len(plan.gpus) and (buf, ranks) not in plan.gpus[m].groups:
                    errors.append(f"rank {g.id}'s NVLS group {list(ranks)} is not declared by "
                                  f"rank {m}")
