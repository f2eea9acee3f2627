"""Test helpers: find the MSCCL reference files, edit XML text by line, write small algorithms.

Editing works on text (not on a parsed tree) so broken variants keep every byte of the
original except the one change under test.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# msccl-tools' example XML, kept outside the repository (its licence is not ours to ship)
REFERENCE = Path(os.environ.get("TECCL_MSCCL_REFERENCE")
                 or REPO.parent / "shared" / "msccl-reference")
MISSING = ("MSCCL reference XML not found: put msccl-reference/ in a 'shared' directory beside "
           "the repository or set TECCL_MSCCL_REFERENCE")
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason=MISSING)

_ATTR = re.compile(r'(\w+)="([^"]*)"')


def reference_files() -> list[Path]:
    """Every reference XML (both folders), or a skip when the shared folder is absent."""
    if not REFERENCE.is_dir():
        pytest.skip(MISSING)
    return sorted(REFERENCE.glob("*/*.xml"))


def reference(name: str) -> str:
    """Text of one reference file by file name (skips when absent)."""
    for path in reference_files():
        if path.name == name:
            return path.read_text()
    pytest.skip(f"reference file {name} not found")


def locate(text: str) -> dict[tuple, int]:
    """Line index of every gpu ``(g,)``, tb ``(g, t)`` and step ``(g, t, position)``."""
    where: dict[tuple, int] = {}
    gpu = tb = pos = -1
    for i, line in enumerate(text.split("\n")):
        tag = line.strip()
        if tag.startswith("<gpu "):
            gpu = int(_ATTR.search(tag).group(2))
            where[(gpu,)] = i
        elif tag.startswith("<tb "):
            tb, pos = int(dict(_ATTR.findall(tag))["id"]), 0
            where[(gpu, tb)] = i
        elif tag.startswith("<step "):
            where[(gpu, tb, pos)] = i
            pos += 1
    return where


def attrs(text: str, key: tuple) -> dict[str, str]:
    """Attributes of the element at ``key`` (see :func:`locate`)."""
    return dict(_ATTR.findall(text.split("\n")[locate(text)[key]]))


def edit(text: str, key: tuple, **changes: object) -> str:
    """Change attributes of one gpu/tb/step in place."""
    lines = text.split("\n")
    i = locate(text)[key]
    for name, value in changes.items():
        lines[i], n = re.subn(rf'\b{name}="[^"]*"', f'{name}="{value}"', lines[i])
        assert n == 1, f"no attribute {name} on line {i}: {lines[i]}"
    return "\n".join(lines)


def delete(text: str, key: tuple) -> str:
    lines = text.split("\n")
    del lines[locate(text)[key]]
    return "\n".join(lines)


def insert_after(text: str, key: tuple, line: str) -> str:
    lines = text.split("\n")
    lines.insert(locate(text)[key] + 1, line)
    return "\n".join(lines)


def step_line(s: int, type: str, srcbuf: str = "i", srcoff: int = -1, dstbuf: str = "o",
              dstoff: int = -1, cnt: int = 1, depid: int = -1, deps: int = -1,
              hasdep: int = 0) -> str:
    return (f'      <step s="{s}" type="{type}" srcbuf="{srcbuf}" srcoff="{srcoff}" '
            f'dstbuf="{dstbuf}" dstoff="{dstoff}" cnt="{cnt}" depid="{depid}" deps="{deps}" '
            f'hasdep="{hasdep}"/>')


def algo_xml(coll: str, ngpus: int, nchunks: int, gpus: dict[int, dict], *, inplace: int = 0,
             nchannels: int = 1, proto: str = "Simple", max_bytes: int = 0) -> str:
    """A small algorithm. ``gpus[g] = {"i": n, "o": n, "s": n, "tbs": [(send, recv, chan,
    [step tuples (type, srcbuf, srcoff, dstbuf, dstoff[, cnt, depid, deps, hasdep])])]}``."""
    out = [f'<algo name="t" proto="{proto}" nchannels="{nchannels}" nchunksperloop="{nchunks}" '
           f'ngpus="{ngpus}" coll="{coll}" inplace="{inplace}" outofplace="{1 - inplace}" '
           f'minBytes="0" maxBytes="{max_bytes}">']
    for g, spec in sorted(gpus.items()):
        out.append(f'  <gpu id="{g}" i_chunks="{spec.get("i", 0)}" o_chunks="{spec.get("o", 0)}" '
                   f's_chunks="{spec.get("s", 0)}">')
        for t, (send, recv, chan, steps) in enumerate(spec["tbs"]):
            out.append(f'    <tb id="{t}" send="{send}" recv="{recv}" chan="{chan}">')
            out += [step_line(p, *st) for p, st in enumerate(steps)]
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"
