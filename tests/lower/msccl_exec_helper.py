"""A small symbolic executor of MSCCL XML, for the lowering tests only.

Independent of te_ccl.lower: buffers hold multisets of (position, input index) pairs, so
a reduction is the multiset union and a wrong or doubled contribution shows up. Thread
blocks are interleaved in a seeded random order, so a missing dependency shows up as a
read of a stale value under some seed. Connections are FIFOs of ``depth`` entries.
"""

from __future__ import annotations

import random
from collections import Counter, deque

from lxml import etree

Value = tuple  # sorted tuple of ((pos, idx), count)


def _v(*items) -> Value:
    return tuple(sorted(Counter(items).items()))


def _add(a: Value, b: Value) -> Value:
    c = Counter(dict(a))
    c.update(dict(b))
    return tuple(sorted(c.items()))


def expected(coll: str, n: int, c: int, inplace: bool, root: int = 0
             ) -> tuple[dict, dict]:
    """(initial buffers, required final slots) for an N-rank collective with c chunks/rank."""
    grow = coll in ("allgather", "gather")
    nin = c if grow else (c if coll in ("broadcast", "reduce") else n * c)
    init, want = {}, {}
    for p in range(n):
        for j in range(nin):
            if coll in ("broadcast", "scatter") and p != root:
                continue
            slot = ("o", p * c + j) if (inplace and grow) else ("i", j)
            init[(p, *slot)] = _v((p, j))
    allsum = lambda idx: tuple(sorted(Counter({(q, idx): 1 for q in range(n)}).items()))  # noqa: E731
    outbuf = "i" if inplace and not grow else "o"
    for p in range(n):
        if coll == "allgather":
            for q in range(n):
                for j in range(c):
                    want[(p, "o", q * c + j)] = _v((q, j))
        elif coll == "gather" and p == root:
            for q in range(n):
                for j in range(c):
                    want[(p, "o", q * c + j)] = _v((q, j))
        elif coll == "alltoall":
            for s in range(n):
                for j in range(c):
                    want[(p, outbuf, s * c + j)] = _v((s, p * c + j))
        elif coll == "reducescatter":
            for j in range(c):
                want[(p, outbuf, (p * c + j) if inplace else j)] = allsum(p * c + j)
        elif coll == "scatter":
            for j in range(c):
                want[(p, outbuf, (p * c + j) if inplace else j)] = _v((root, p * c + j))
        elif coll == "allreduce" or (coll == "reduce" and p == root):
            for k in range(nin):
                want[(p, outbuf, k)] = allsum(k)
        elif coll == "broadcast":
            for k in range(nin):
                want[(p, outbuf, k)] = _v((root, k))
    return init, want


def run(xml: bytes, init: dict, *, seed: int = 0, depth: int = 4) -> dict:
    """Execute; returns the final buffers {(gpu, buf, idx): value}. Raises AssertionError."""
    root = etree.fromstring(xml)
    rng = random.Random(seed)
    mem = dict(init)
    tbs = []
    for g in root.iter("gpu"):
        for tb in g.iter("tb"):
            steps = [dict(st.attrib) for st in tb.iter("step")]
            tbs.append({"gpu": int(g.get("id")), "id": int(tb.get("id")), "send": int(tb.get("send")),
                        "recv": int(tb.get("recv")), "chan": int(tb.get("chan")), "steps": steps, "pc": 0})
    done = {(t["gpu"], t["id"]): -1 for t in tbs}
    fifo: dict[tuple, deque] = {}
    live = list(tbs)
    while live:
        order = live[:]
        rng.shuffle(order)
        progressed = False
        for t in order:
            if rng.random() < 0.5 and t["pc"] < len(t["steps"]):
                progressed |= _try_step(t, mem, fifo, done, depth)
        for t in order if not progressed else ():
            if t["pc"] < len(t["steps"]):
                progressed |= _try_step(t, mem, fifo, done, depth)
        live = [t for t in live if t["pc"] < len(t["steps"])]
        assert progressed or not live, f"deadlock: {[(t['gpu'], t['id'], t['pc']) for t in live]}"
    assert all(not q for q in fifo.values()), "data left unreceived"
    return mem


def _try_step(t, mem, fifo, done, depth) -> bool:
    st = t["steps"][t["pc"]]
    g, typ = t["gpu"], st["type"]
    assert int(st["s"]) == t["pc"], f"gpu {g} tb {t['id']}: s != position"
    depid = int(st["depid"])
    if depid >= 0 and done[(g, depid)] < int(st["deps"]):
        return False
    out_q = fifo.setdefault((g, t["send"], t["chan"]), deque())
    in_q = fifo.setdefault((t["recv"], g, t["chan"]), deque())
    if typ in ("r", "rcs", "rrs", "rrc", "rrcs") and not in_q:
        return False
    if typ in ("s", "rcs", "rrs", "rrcs") and len(out_q) >= depth:
        return False
    src = (g, st["srcbuf"], int(st["srcoff"]))
    dst = (g, st["dstbuf"], int(st["dstoff"]))

    def read(slot):
        assert slot in mem, f"gpu {g} tb {t['id']} step {t['pc']}: read of unwritten {slot}"
        return mem[slot]

    if typ == "s":
        out_q.append(read(src))
    elif typ == "r":
        mem[dst] = in_q.popleft()
    elif typ == "rcs":
        mem[dst] = in_q.popleft()
        out_q.append(mem[dst])
    elif typ == "rrs":
        out_q.append(_add(in_q.popleft(), read(src)))
    elif typ == "rrc":
        mem[dst] = _add(in_q.popleft(), read(src))
    elif typ == "rrcs":
        mem[dst] = _add(in_q.popleft(), read(src))
        out_q.append(mem[dst])
    elif typ == "cpy":
        mem[dst] = read(src)
    elif typ == "re":
        mem[dst] = _add(read(dst), read(src))
    done[(g, t["id"])] = t["pc"]
    t["pc"] += 1
    return True


def check(xml: bytes, coll: str, n: int, c: int, inplace: bool, root: int = 0,
          seeds: int = 8) -> None:
    """Run under several interleavings and compare the required slots."""
    init, want = expected(coll, n, c, inplace, root)
    for seed in range(seeds):
        mem = run(xml, init, seed=seed)
        bad = {k: (mem.get(k), v) for k, v in want.items() if mem.get(k) != v}
        assert not bad, f"seed {seed}: wrong final slots {dict(list(bad.items())[:4])}"
