"""Read an MSCCL XML file into the typed :class:`~te_ccl.verify.msccl.model.Algo`.

:func:`parse_msccl` is lenient: it returns the algorithm together with every textual
finding (quirks of the runtime's reader, leading zeros, missing attributes). The strict
:func:`read_msccl` is what other tools (the simulator) call: it returns the algorithm only
if the runtime would read the file the same way, and raises otherwise.

>>> algo = read_msccl('''<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="0">
...   <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0">
...     <tb id="0" send="1" recv="-1" chan="0">
...       <step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
...     </tb>
...   </gpu>
... </algo>''')
>>> algo.coll, algo.gpus[0].threadblocks[0].steps[0].type
('allgather', 's')
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from te_ccl.verify.msccl.fastread import read_canonical
from te_ccl.verify.msccl.findings import Finding, finding
from te_ccl.verify.msccl.model import DEFAULTS, Algo, Gpu, Step, Threadblock
from te_ccl.verify.msccl.text import (
    MscclReadError,
    MscclSyntaxError,
    RawElement,
    strtol,
    tokenize,
)

__all__ = ["read_msccl", "parse_msccl", "parse_text", "load_text", "source_name", "paused_gc",
           "MscclReadError", "MscclSyntaxError", "MscclFormatError"]

_PLAIN_INT = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+)\Z")
_OCTAL = re.compile(r"[+-]?0[0-9]")
_STR_ATTRS = {"type", "srcbuf", "dstbuf", "proto", "coll", "name"}
_ALGO_REQUIRED = ("nchunksperloop", "nchannels", "ngpus", "proto", "coll")
_ALGO_OPTIONAL = ("minBytes", "maxBytes", "inplace", "outofplace")


class MscclFormatError(MscclSyntaxError):
    """:func:`read_msccl` found errors the runtime's reader would reject (see ``findings``)."""


def _is_text(path_or_text: str | Path) -> bool:
    return isinstance(path_or_text, str) and "<" in path_or_text


def source_name(path_or_text: str | Path) -> str:
    """How messages name the input: the path, or ``<string>`` for XML text."""
    return "<string>" if _is_text(path_or_text) else str(Path(path_or_text))


def load_text(path_or_text: str | Path) -> tuple[str, str]:
    """``(text, source name)`` from a path or from XML text (anything containing ``<``)."""
    if _is_text(path_or_text):
        return path_or_text, "<string>"
    path = Path(path_or_text)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise MscclReadError(f"cannot read the file ({e.strerror or e})", file=str(path)) from e
    if b"\0" in data:
        raise MscclReadError("binary file, not MSCCL XML", file=str(path))
    try:
        return data.decode("utf-8"), str(path)
    except UnicodeDecodeError as e:
        raise MscclReadError(f"not UTF-8 text (byte {e.start})", file=str(path)) from e


def read_msccl(path_or_text: str | Path) -> Algo:
    """The algorithm of a file (or XML text); raises if the runtime would not read it alike.

    Raises
    ------
    MscclReadError
        Missing file, binary or not XML at all (a ``SpecError``, exit code 2).
    MscclFormatError
        XML the runtime's reader rejects or reads differently (a ``VerificationError``).
    """
    algo, found = parse_msccl(path_or_text)
    errors = [f for f in found if f.severity == "error"]
    if errors:
        raise MscclFormatError(errors)
    return algo


def parse_msccl(path_or_text: str | Path) -> tuple[Algo, list[Finding]]:
    """Lenient read: the algorithm plus every textual finding, in file order.

    Files in the canonical layout are read line by line (:mod:`.fastread`), without
    holding the text; any other file goes through the general tokenizer.
    """
    source = source_name(path_or_text)
    try:
        with _lines(path_or_text) as lines, paused_gc():
            fast = read_canonical(lines)
    except (OSError, UnicodeDecodeError):
        fast = None
    if fast is None:
        return parse_text(*load_text(path_or_text))
    found: list[Finding] = []
    return Algo(**_header(fast[0], found), gpus=fast[1], source=source), found


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside: reading and checking a file allocate millions
    of small tuples and no garbage cycles worth collecting, and every collection would
    rescan them all (it costs up to 4x the time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _split(text: str) -> Iterator[str]:
    """The lines of ``text`` with their ``\\n``, one at a time (``io.StringIO`` would hold a
    4-byte-per-character copy of a text of hundreds of MB)."""
    start, end, find = 0, len(text), text.find
    while start < end:
        stop = find("\n", start) + 1 or end
        yield text[start:stop]
        start = stop


@contextmanager
def _lines(path_or_text: str | Path) -> Iterator[Iterator[str]]:
    if _is_text(path_or_text):
        yield _split(str(path_or_text))
        return
    with open(path_or_text, encoding="utf-8", newline="") as f:
        yield iter(f)


def parse_text(text: str, source: str = "<string>") -> tuple[Algo, list[Finding]]:
    """:func:`parse_msccl` of text already loaded; ``source`` names it in messages."""
    top, found = tokenize(text, source=source)
    algos = [e for e in top if e.name == "algo"]
    if not algos:
        found.append(finding("first-element-algo", f"no <algo> element (first is <{top[0].name}>)"
                             if top else "no element at all", line=1))
        raise MscclSyntaxError(found)
    if top[0].name != "algo":
        found.append(finding("first-element-algo", f"the first element is <{top[0].name}>",
                             line=top[0].line))
    for extra in top:
        if extra is not algos[0]:
            found.append(finding("ignored-element", f"<{extra.name}> outside the first <algo>",
                                 line=extra.line))
    header = _header(algos[0], found)
    gpus = tuple(_gpu(g, found) for g in _children(algos[0], "gpu", found))
    return Algo(**header, gpus=gpus, source=source), found


def _int(elem: RawElement, key: str, found: list[Finding], ctx: dict[str, int | None],
         *, bits: int = 32, required: bool = True) -> int | None:
    raw = elem.attrs.get(key)
    if raw is None:
        if required:
            found.append(finding("missing-attribute", f"<{elem.name}> has no {key}",
                                 line=elem.line, **ctx))
        return None
    value = strtol(raw)
    if _OCTAL.match(raw.strip()):
        found.append(finding("leading-zero", f"{key}=\"{raw}\" reads as {value}",
                             line=elem.line, **ctx))
    elif not _PLAIN_INT.match(raw):
        found.append(finding("not-an-integer", f"{key}=\"{raw}\" reads as {value}",
                             line=elem.line, **ctx))
    half = 2 ** (bits - 1)
    return (value + half) % (2 * half) - half  # C assigns the long to an int: wrap around


def _fields(elem: RawElement, kind: str, found: list[Finding],
            ctx: dict[str, int | None]) -> dict[str, int | str]:
    """Every attribute of a gpu/tb/step, defaulted (with a finding) when missing."""
    out: dict[str, int | str] = {}
    for key, default in DEFAULTS[kind].items():
        if key in _STR_ATTRS:
            value = elem.attrs.get(key)
            if value is None:
                found.append(finding("missing-attribute", f"<{kind}> has no {key}",
                                     line=elem.line, **ctx))
            out[key] = default if value is None else value
        else:
            value = _int(elem, key, found, ctx)
            out[key] = default if value is None else value
    return out


def _children(elem: RawElement, name: str, found: list[Finding]) -> list[RawElement]:
    for c in elem.children:
        if c.name != name:
            found.append(finding("ignored-element", f"<{c.name}> inside <{elem.name}>",
                                 line=c.line))
    return [c for c in elem.children if c.name == name]


def _header(elem: RawElement, found: list[Finding]) -> dict[str, int | str | None]:
    """The :class:`Algo` fields given by the ``<algo>`` element's attributes."""
    ctx: dict[str, int | None] = {}
    values: dict[str, int | None] = {}
    for key in _ALGO_REQUIRED:
        if key in ("proto", "coll"):
            if key not in elem.attrs:
                found.append(finding("missing-attribute", f"<algo> has no {key}",
                                     line=elem.line))
        else:
            values[key] = _int(elem, key, found, ctx)
    for key in _ALGO_OPTIONAL:
        if key not in elem.attrs:
            found.append(finding("missing-algo-attribute", f"<algo> has no {key}",
                                 line=elem.line))
        values[key] = _int(elem, key, found, ctx, bits=64 if key.endswith("Bytes") else 32,
                           required=False)
    return dict(
        name=elem.attrs.get("name", ""), proto=elem.attrs.get("proto", ""),
        nchannels=values["nchannels"] or 0, nchunksperloop=values["nchunksperloop"] or 0,
        ngpus=values["ngpus"] or 0, coll=elem.attrs.get("coll", ""),
        inplace=values["inplace"] or 0, outofplace=values["outofplace"] or 0,
        min_bytes=values["minBytes"], max_bytes=values["maxBytes"])


def _gpu(elem: RawElement, found: list[Finding]) -> Gpu:
    f = _fields(elem, "gpu", found, {})
    gid = int(f["id"])
    tbs = tuple(_tb(t, gid, found) for t in _children(elem, "tb", found))
    return Gpu(gid, int(f["i_chunks"]), int(f["o_chunks"]), int(f["s_chunks"]), tbs, elem.line)


def _tb(elem: RawElement, gid: int, found: list[Finding]) -> Threadblock:
    f = _fields(elem, "tb", found, {"gpu": gid})
    tid = int(f["id"])
    steps = []
    for pos, s in enumerate(_children(elem, "step", found)):
        sf = _fields(s, "step", found, {"gpu": gid, "tb": tid, "step": pos})
        steps.append(Step(position=pos, line=s.line, **sf))  # type: ignore[arg-type]
    return Threadblock(tid, int(f["send"]), int(f["recv"]), int(f["chan"]), tuple(steps),
                       elem.line)
