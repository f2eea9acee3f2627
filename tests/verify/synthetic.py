"""Large valid MSCCL files without the solver: a pipelined ring AllGather on any GPU count.

Chunk ``m = q·c + j`` (rank ``q``'s ``j``-th) travels on channel ``m mod nchannels``
around the ring ``g → g+1``. On each GPU and channel a receiving thread block stores
every chunk arriving from ``g-1`` (``r``, publishing a flag) and a sending thread block
forwards it to ``g+1`` after waiting for that flag (``s``), both in the order of the
chunk's distance from its origin, so sends and receives match. In-place (``o`` only).
With 1024 GPUs, 2 chunks per rank and 32 channels: 64 thread blocks of ≤ 64 steps per
GPU, 4 million steps — the size of the scale instances' XML.

``python -m tests.verify.synthetic NGPUS OUT.xml [CHUNKS_PER_RANK] [NCHANNELS]`` writes one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path


def _step(s: int, kind: str, off: int, depid: int = -1, deps: int = -1, hasdep: int = 0) -> str:
    src = off if kind == "s" else -1
    dst = off if kind == "r" else -1
    return (f'      <step s="{s}" type="{kind}" srcbuf="o" srcoff="{src}" dstbuf="o" '
            f'dstoff="{dst}" cnt="1" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')


def _gpu(g: int, n: int, c: int, nch: int) -> Iterator[str]:
    yield f'  <gpu id="{g}" i_chunks="0" o_chunks="{n * c}" s_chunks="0">'
    channels: list[list[tuple[int, int]]] = [[] for _ in range(nch)]
    for d in range(n):
        for j in range(c):
            m = ((g - d) % n) * c + j
            channels[m % nch].append((d, m))
    for k, order in enumerate(channels):
        recvs = [(d, m) for d, m in order if d >= 1]
        sends = [(d, m) for d, m in order if d <= n - 2]
        at = {m: i for i, (_, m) in enumerate(recvs)}
        yield f'    <tb id="{2 * k}" send="-1" recv="{(g - 1) % n}" chan="{k}">'
        for i, (d, m) in enumerate(recvs):
            yield _step(i, "r", m, hasdep=int(d <= n - 2))
        yield "    </tb>"
        yield f'    <tb id="{2 * k + 1}" send="{(g + 1) % n}" recv="-1" chan="{k}">'
        for i, (d, m) in enumerate(sends):
            yield _step(i, "s", m, *((2 * k, at[m]) if d else (-1, -1)))
        yield "    </tb>"
    yield "  </gpu>"


def ring_allgather(n: int, c: int = 2, nchannels: int = 32) -> Iterator[str]:
    """Lines (without newlines) of the file; valid for ``n ≥ 2`` and ``c·n ≥ nchannels``."""
    yield (f'<algo name="ring_{n}" proto="Simple" nchannels="{nchannels}" '
           f'nchunksperloop="{n * c}" ngpus="{n}" coll="allgather" inplace="1" outofplace="0" '
           'minBytes="0" maxBytes="0">')
    for g in range(n):
        yield from _gpu(g, n, c, nchannels)
    yield "</algo>"


def write(path: Path, n: int, c: int = 2, nchannels: int = 32) -> None:
    with open(path, "w") as f:
        for line in ring_allgather(n, c, nchannels):
            f.write(line + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    write(Path(args[1]), int(args[0]), *(int(a) for a in args[2:4]))
