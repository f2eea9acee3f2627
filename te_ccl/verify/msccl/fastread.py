"""Fast path of the reader for files in the canonical layout (what msccl-tools and teccl
write): one tag per line, attributes in the usual order, plain decimal numbers.

A 1024-GPU algorithm has millions of steps; the general reader (:mod:`.text`, then
:mod:`.reader`) tokenises, builds a tree and checks every attribute for quirks, at ~50 µs
a step. Here each line is matched whole by one precompiled pattern and converted
directly. The patterns admit only lines in which the general reader finds nothing to
report (no textual quirk, every attribute present, no leading zero, no sign but ``-``,
values that fit an ``int``; comments only on lines of their own), and the element nesting is checked as it goes; so when
every line matches, the result equals the general reader's. When any line does not,
:func:`read_canonical` returns None and the caller uses the general reader for the
whole file, which keeps its findings and their order.

>>> elem, gpus = read_canonical(iter(['<algo name="x" ngpus="1">\\n', '  <gpu id="0" '
...     'i_chunks="1" o_chunks="1" s_chunks="0">\\n', '  </gpu>\\n', '</algo>\\n']))
>>> elem.attrs["ngpus"], gpus[0].i_chunks, gpus[0].line
('1', 1, 2)
>>> read_canonical(iter(['<algo name="x" ngpus="01">\\n', '  <gpu id="00" i_chunks="1" '
...     'o_chunks="1" s_chunks="0">\\n', '  </gpu>\\n', '</algo>\\n'])) is None
True
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator

from te_ccl.deadline import check
from te_ccl.verify.msccl.findings import Findings
from te_ccl.verify.msccl.model import Gpu, Step, Threadblock
from te_ccl.verify.msccl.text import RawElement, parse_tag

__all__ = ["read_canonical"]

_N = r"(-?(?:0|[1-9][0-9]{0,8}))"   # what strtol and int() read alike, without a finding
_W = r"([a-z]{1,8})"
_STEP = re.compile(rf' *<step s="{_N}" type="{_W}" srcbuf="{_W}" srcoff="{_N}" '
                   rf'dstbuf="{_W}" dstoff="{_N}" cnt="{_N}" depid="{_N}" deps="{_N}" '
                   rf'hasdep="{_N}"/>\n?')
_TB = re.compile(rf' *<tb id="{_N}" send="{_N}" recv="{_N}" chan="{_N}">\n?')
_GPU = re.compile(rf' *<gpu id="{_N}" i_chunks="{_N}" o_chunks="{_N}" s_chunks="{_N}">\n?')
_ALGO = re.compile(r' *(<algo(?: [^\s="<>/]+="[^"<>]*")*>)\n?')
_BLANK = re.compile(r" *(?:<!--(?:(?!-->).)*-->)?\n?")   # blank, or one whole comment


class _Values(dict):
    """Attribute text -> value (int for numbers), one shared object per distinct text:
    offsets and names repeat millions of times."""

    def __missing__(self, text: str) -> int | str:
        value = self[text] = int(text) if text[0] in "-0123456789" else sys.intern(text)
        return value


def _closes(line: str, tag: str) -> bool:
    rest = line.lstrip(" ")
    return rest == tag or (rest[:-1] == tag and rest[-1] == "\n")


def read_canonical(lines: Iterator[str]) -> tuple[RawElement, tuple[Gpu, ...]] | None:
    """The ``<algo>`` element (attributes only) and its GPUs, or None if some line is not
    canonical. ``lines`` keep their ``\\n``."""
    n = 0
    for line in lines:
        n += 1
        if not _BLANK.fullmatch(line):
            break
    else:
        return None
    m = _ALGO.fullmatch(line)
    if m is None:
        return None
    found = Findings()
    elem, closing, single = parse_tag(m.group(1), n, found)
    if elem is None or found or closing or single:
        return None
    gpus = _body(lines, n)
    return None if gpus is None else (elem, gpus)


def _body(lines: Iterator[str], n: int) -> tuple[Gpu, ...] | None:
    """GPUs up to ``</algo>`` and nothing but blank lines after it."""
    value = _Values().__getitem__
    gpus: list[Gpu] = []
    step_match, tb_match, gpu_match = _STEP.fullmatch, _TB.fullmatch, _GPU.fullmatch
    new = tuple.__new__   # a Step without its keyword-parsing constructor
    gpu = tb = None
    tbs: list[Threadblock] = []
    steps: list[Step] = []
    for line in lines:
        n += 1
        if tb is not None:
            m = step_match(line)
            if m is not None:
                steps.append(new(Step, (*map(value, m.groups()), len(steps), n)))
            elif _closes(line, "</tb>"):
                tbs.append(Threadblock(*tb[0], tuple(steps), tb[1]))
                tb, steps = None, []
            elif not _BLANK.fullmatch(line):
                return None
        elif gpu is not None:
            m = tb_match(line)
            if m is not None:
                tb = (tuple(map(value, m.groups())), n)
            elif _closes(line, "</gpu>"):
                gpus.append(Gpu(*gpu[0], tuple(tbs), gpu[1]))
                gpu, tbs = None, []
                check("reading the MSCCL XML")
            elif not _BLANK.fullmatch(line):
                return None
        else:
            m = gpu_match(line)
            if m is not None:
                gpu = (tuple(map(value, m.groups())), n)
            elif _closes(line, "</algo>"):
                break
            elif not _BLANK.fullmatch(line):
                return None
    else:
        return None
    return tuple(gpus) if all(_BLANK.fullmatch(rest) for rest in lines) else None
