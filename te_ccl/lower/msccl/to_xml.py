"""Pass 6: print a :class:`Program` as the runtime's parser wants it.

No declaration, double quotes, attributes in the order of the reference files, one tag
per line with a 2-space indent per level (what lxml's ``pretty_print`` writes, which
this module used to call). The lines are formatted directly: at 1024 GPUs a program has
millions of steps, and an element tree of them would cost gigabytes. Numbers are Python
ints, so never with leading zeros; names are already restricted to ``[A-Za-z0-9_.+-]``
(nothing to escape). A GPU without thread blocks is written open/closed (never
self-closing) to keep to what msccl-tools emits.

Provenance: given the topology's name and the compiled size, the line after ``<algo …>``
is the comment ``<!-- teccl: topology=NAME size_bytes=N -->``, which the runtime's XML
reader skips (NCCL's ``xmlGetNode`` drops ``<!--`` … ``-->``) and ``teccl simulate`` reads
back (:func:`te_ccl.simulate.msccl.read_provenance`). A name the comment cannot carry
(whitespace, ``--``, ``>``) is left out rather than escaped.
"""

from __future__ import annotations

import re

from te_ccl.lower.msccl.ir import Buf, Gpu, Op, Program, Step

__all__ = ["program_to_xml", "algo_open", "algo_close", "gpu_xml"]

_COMMENT_SAFE = re.compile(r"[A-Za-z0-9_.+/:@=-]+")
_NO_SRC, _NO_DST = (Buf.INPUT, -1), (Buf.OUTPUT, -1)  # what a nop prints
# the XML tokens as plain strings: formatting an enum member costs 4x a str's
_OP = {op: op.value for op in Op}
_BUF = {buf: buf.value for buf in Buf}


def _step(step: Step) -> str:
    """A nop (no slots) prints ``srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1"``."""
    s, op, src, dst, cnt, depid, deps, hasdep = step
    sbuf, soff = src if src is not None else _NO_SRC
    dbuf, doff = dst if dst is not None else _NO_DST
    return (f'      <step s="{s}" type="{_OP[op]}" srcbuf="{_BUF[sbuf]}" srcoff="{soff}" '
            f'dstbuf="{_BUF[dbuf]}" dstoff="{doff}" cnt="{cnt}" depid="{depid}" '
            f'deps="{deps}" hasdep="{1 if hasdep else 0}"/>\n')


def algo_open(p: Program, *, provenance: tuple[str, int] | None = None) -> str:
    """The ``<algo …>`` line (``p.gpus`` is not looked at), then the provenance comment
    when ``provenance`` is ``(topology name, size in bytes)``."""
    line = (f'<algo name="{p.name}" proto="{p.proto}" nchannels="{p.nchannels}" '
            f'nchunksperloop="{p.nchunksperloop}" ngpus="{p.ngpus}" coll="{p.coll}" '
            f'inplace="{int(p.inplace)}" outofplace="{int(not p.inplace)}" '
            f'minBytes="{p.min_bytes}" maxBytes="{p.max_bytes}">\n')
    if provenance is None:
        return line
    topology, size_bytes = provenance
    if not _COMMENT_SAFE.fullmatch(topology) or "--" in topology:
        return line
    return line + f"  <!-- teccl: topology={topology} size_bytes={int(size_bytes)} -->\n"


def algo_close() -> str:
    return "</algo>\n"


def gpu_xml(gpu: Gpu) -> str:
    """One ``<gpu>`` element with its thread blocks and steps."""
    out = [f'  <gpu id="{gpu.id}" i_chunks="{gpu.i_chunks}" o_chunks="{gpu.o_chunks}" '
           f's_chunks="{gpu.s_chunks}">\n']
    for tb in gpu.threadblocks:
        out.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">\n')
        out.extend(map(_step, tb.steps))
        out.append("    </tb>\n")
    out.append("  </gpu>\n")
    return "".join(out)


def program_to_xml(program: Program, *, provenance: tuple[str, int] | None = None) -> bytes:
    """The XML bytes of ``program`` (UTF-8, newline-terminated); see :func:`algo_open`."""
    return (algo_open(program, provenance=provenance) + "".join(map(gpu_xml, program.gpus))
            + algo_close()).encode()
