"""Pass 6: print a :class:`Program` as the runtime's parser wants it.

lxml writes no declaration, double quotes and attributes in insertion order (the order
of the reference files); ``pretty_print`` puts one tag per line with a 2-space indent.
Numbers are Python ints, so never with leading zeros. A GPU without thread blocks is
written open/closed (never self-closing) to keep to what msccl-tools emits.
"""

from __future__ import annotations

from lxml import etree

from te_ccl.lower.msccl.ir import Buf, Gpu, Program, Slot, Step

__all__ = ["program_to_xml"]

_NOP_SRC = Slot(Buf.INPUT, -1)
_NOP_DST = Slot(Buf.OUTPUT, -1)


def _attrs(elem: etree._Element, pairs: list[tuple[str, object]]) -> None:
    for key, value in pairs:
        elem.set(key, str(int(value)) if isinstance(value, bool | int) else str(value))


def _step(parent: etree._Element, step: Step) -> None:
    src = step.src or _NOP_SRC
    dst = step.dst or _NOP_DST
    _attrs(etree.SubElement(parent, "step"), [
        ("s", step.s), ("type", step.op.value), ("srcbuf", src.buf.value),
        ("srcoff", src.index), ("dstbuf", dst.buf.value), ("dstoff", dst.index),
        ("cnt", step.cnt), ("depid", step.depid), ("deps", step.deps), ("hasdep", step.hasdep),
    ])


def _gpu(parent: etree._Element, gpu: Gpu) -> None:
    elem = etree.SubElement(parent, "gpu")
    _attrs(elem, [("id", gpu.id), ("i_chunks", gpu.i_chunks), ("o_chunks", gpu.o_chunks),
                  ("s_chunks", gpu.s_chunks)])
    for tb in gpu.threadblocks:
        tb_elem = etree.SubElement(elem, "tb")
        _attrs(tb_elem, [("id", tb.id), ("send", tb.send), ("recv", tb.recv), ("chan", tb.chan)])
        for step in tb.steps:
            _step(tb_elem, step)
    if not gpu.threadblocks:
        elem.text = "\n  "


def program_to_xml(program: Program) -> bytes:
    """The XML bytes of ``program`` (UTF-8, newline-terminated)."""
    root = etree.Element("algo")
    _attrs(root, [
        ("name", program.name), ("proto", program.proto), ("nchannels", program.nchannels),
        ("nchunksperloop", program.nchunksperloop), ("ngpus", program.ngpus),
        ("coll", program.coll), ("inplace", program.inplace),
        ("outofplace", not program.inplace), ("minBytes", program.min_bytes),
        ("maxBytes", program.max_bytes),
    ])
    for gpu in program.gpus:
        _gpu(root, gpu)
    return etree.tostring(root, pretty_print=True, encoding="utf-8")
