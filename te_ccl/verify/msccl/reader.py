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

import re
from collections.abc import Iterator
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from te_ccl.nogc import paused_gc
from te_ccl.runtime_limits import MSCCL, RUNTIMES
from te_ccl.verify.msccl.fastread import read_canonical
from te_ccl.verify.msccl.findings import Findings, clip, finding
from te_ccl.verify.msccl.model import BUFFERS, DEFAULTS, Algo, Gpu, Step, Threadblock
from te_ccl.verify.msccl.stream import decoded, lines_of, uncommented
from te_ccl.verify.msccl.text import (
    MscclReadError,
    MscclSyntaxError,
    RawElement,
    strtol,
    tokenize,
)

__all__ = ["read_msccl", "read_msccl_lenient", "parse_msccl", "parse_text", "load_text",
           "source_name", "upgrade_legacy", "LEGACY_RULES", "MAX_RANKS",
           "MAX_CHUNKS", "MAX_SLOTS", "MAX_REACH", "MAX_GENERAL_TEXT", "MAX_GENERAL_TAGS",
           "MscclReadError", "MscclSyntaxError", "MscclFormatError"]

_PLAIN_INT = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+)\Z")
_OCTAL = re.compile(r"[+-]?0[0-9]")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,17})\Z")   # inside a C long
_STR_ATTRS = {"type", "srcbuf", "dstbuf", "proto", "coll", "name"}
_ALGO_REQUIRED = ("nchunksperloop", "nchannels", "ngpus", "proto", "coll")
_ALGO_OPTIONAL = ("minBytes", "maxBytes", "inplace", "outofplace")

# What a file may declare, from the runtime's own limits, checked before anything is
# allocated per rank or per chunk.
MAX_RANKS = MSCCL.max_elements - 2
"""A rank's reader holds ``<algo>``, every ``<gpu>`` and its own elements in
``max_elements`` nodes, so no file can give more ranks a ``<gpu>`` each."""
MAX_CHUNKS = 2 * MAX_RANKS * (MSCCL.max_count - 1)
"""On two or more ranks every collective moves at least half of ``nchunksperloop``
through some rank, whose fewer than ``max_elements`` steps move at most ``MSCCL.max_count - 1``
chunks each."""
MAX_SLOTS = 1 << 21
"""The verifier models ``ngpus * nchunksperloop`` chunks at once (tens of bytes each);
the largest files teccl writes need about a million."""
MAX_REACH = 4 * MAX_SLOTS
"""Chunks the steps may reach in all GPUs' buffers together: the symbolic run sizes each
GPU's memory by the furthest offset its steps touch inside the declared sizes (declared
sizes alone cost nothing)."""
MAX_GENERAL_TEXT = 16 << 20
"""Characters of a file outside the canonical layout that the general tokenizer holds
(comment text does not count): it needs about 20 bytes of memory per character, and a
15 MB file with one finding per line takes 330 MB. Canonical files are streamed
without a limit."""
MAX_GENERAL_TAGS = MAX_GENERAL_TEXT // 100
"""Tags (comments included) of a file outside the canonical layout that the general
tokenizer takes: a tag that breaks many rules costs it up to ~25 µs, so this keeps the
worst file to a few seconds. Real files average more than 100 characters a tag (a step
takes 100 to 130), so they reach :data:`MAX_GENERAL_TEXT` first; only filler packs
more tags into it."""
LEGACY_RULES = frozenset({"missing-algo-attribute"})
"""What tells msccl-tools' older format (no ``outofplace``/``minBytes``/``maxBytes``)."""


class MscclFormatError(MscclSyntaxError):
    """:func:`read_msccl` found errors the runtime's reader would reject (see ``findings``)."""


def _is_text(path_or_text: str | Path) -> bool:
    return isinstance(path_or_text, str) and "<" in path_or_text


def source_name(path_or_text: str | Path) -> str:
    """How messages name the input: the path, or ``<string>`` for XML text."""
    return "<string>" if _is_text(path_or_text) else str(Path(path_or_text))


def load_text(path_or_text: str | Path) -> tuple[str, str]:
    """``(text, source name)`` from a path or from XML text (anything containing ``<``).

    A file is read in bounded memory (:mod:`.stream`); comments keep only their newlines,
    and more than :data:`MAX_GENERAL_TEXT` other characters or :data:`MAX_GENERAL_TAGS`
    tags are refused as they arrive."""
    if _is_text(path_or_text):
        pieces, source = uncommented(iter([path_or_text])), "<string>"
    else:
        pieces, source = decoded(path_or_text), str(Path(path_or_text))
    parts, chars, tags = [], 0, 0
    for piece in pieces:
        chars += len(piece)
        tags += piece.count("<")
        if chars > MAX_GENERAL_TEXT or tags > MAX_GENERAL_TAGS:
            what = (f"{MAX_GENERAL_TEXT >> 20} MiB of XML" if chars > MAX_GENERAL_TEXT
                    else f"{MAX_GENERAL_TAGS:,} tags")
            raise MscclReadError(
                f"more than {what}{_size(path_or_text)} outside the canonical layout, more "
                "than the general reader takes; files as msccl-tools and teccl write them "
                "(one tag per line, every attribute in their order, plain decimal numbers) "
                "have no size limit", file=source)
        parts.append(piece)
    return "".join(parts), source


def _size(path_or_text: str | Path) -> str:
    """`` (the file has N bytes)`` for a file, nothing for text."""
    if _is_text(path_or_text):
        return ""
    try:
        return f" (the file has {Path(path_or_text).stat().st_size:,} bytes)"
    except OSError:
        return ""


def read_msccl(path_or_text: str | Path) -> Algo:
    """The algorithm of a file (or XML text); raises if the runtime would not read it alike.

    Raises
    ------
    MscclReadError
        Missing file, binary or not XML at all, or a header beyond the runtime's limits
        (a ``SpecError``, exit code 2).
    MscclFormatError
        XML the runtime's reader rejects or reads differently (a ``VerificationError``).
    """
    algo, found = parse_msccl(path_or_text)
    errors = [f for f in found if f.severity == "error"]
    if errors:
        raise MscclFormatError(errors)
    return algo


def read_msccl_lenient(path_or_text: str | Path) -> tuple[Algo, list[str]]:
    """:func:`read_msccl` that also takes msccl-tools' older format: the algorithm (read
    as the older format meant it: ``inplace`` picks the one mode, any size) and one
    warning naming what the executor would miss (none for a current file)."""
    algo, found = parse_msccl(path_or_text)
    errors = [f for f in found if f.severity == "error" and f.rule not in LEGACY_RULES]
    if errors:
        raise MscclFormatError(errors)
    missing = [f.message.split(" — ")[0].split(" has no ")[-1] for f in found
               if f.rule in LEGACY_RULES]
    if not missing:
        return algo, []
    mode = "in-place" if algo.inplace else "out-of-place"
    legacy = replace(algo, outofplace=0 if algo.inplace else 1,
                     min_bytes=algo.min_bytes or 0, max_bytes=algo.max_bytes or 0)
    return legacy, [f"{algo.source}: msccl-tools' older format (no {', '.join(missing)}), "
                    f"read as {mode} for any size; the executor needs `teccl verify "
                    "--upgrade -o NEW.xml`"]


_ALGO_TAG = re.compile(r"<!--.*?-->|<algo\b[^<>]*?(/?>)", re.S)


def upgrade_legacy(text: str) -> tuple[str, list[str]]:
    """``text`` with the ``<algo>`` attributes of the executor's format that it lacks
    added (``outofplace`` the opposite of ``inplace``; ``minBytes="0" maxBytes="0"``,
    any size), and their names; every other byte is kept.

    >>> upgrade_legacy('<algo name="a" ngpus="2" inplace="1">\\n</algo>\\n')
    ('<algo name="a" ngpus="2" inplace="1" outofplace="0" minBytes="0" maxBytes="0">\\n</algo>\\n', ['outofplace', 'minBytes', 'maxBytes'])
    """
    head = next((m for m in _ALGO_TAG.finditer(text) if m.group(1) is not None), None)
    if head is None:
        return text, []
    attrs = dict(re.findall(r'\s([^\s=]+)="([^"]*)"', head.group(0)))
    inplace = strtol(attrs.get("inplace", "0")) != 0
    wanted = {"outofplace": "0" if inplace else "1", "minBytes": "0", "maxBytes": "0"}
    missing = [k for k in wanted if k not in attrs]
    cut = head.start(1)
    extra = "".join(f' {k}="{wanted[k]}"' for k in missing)
    return text[:cut] + extra + text[cut:], missing


def parse_msccl(path_or_text: str | Path) -> tuple[Algo, Findings]:
    """Lenient read: the algorithm plus the textual findings, in file order (the first
    :data:`~te_ccl.verify.msccl.findings.KEEP` of each rule, and every rule's count).

    Files in the canonical layout are read line by line (:mod:`.fastread`), without
    holding the text; any other file goes through the general tokenizer. A header that
    declares more than the runtime can hold raises :class:`MscclReadError` before the
    checks allocate anything per rank or chunk.
    """
    source = source_name(path_or_text)
    lines = (_split(str(path_or_text)) if _is_text(path_or_text)
             else lines_of(decoded(path_or_text), MAX_GENERAL_TEXT))
    with paused_gc():
        fast = read_canonical(lines)
    if fast is None:
        algo, found = parse_text(*load_text(path_or_text))
    else:
        found = Findings()
        algo = Algo(**_header(fast[0], found, source), gpus=fast[1], source=source)
    _check_reach(algo)
    return algo, found


def _check_header(values: dict[str, int | None], source: str) -> None:
    """Refuse a header no runtime loads, or one the verifier cannot model in bounded
    memory (a missing attribute, None here, is a finding of its own)."""
    for key, high, what in (
            ("ngpus", MAX_RANKS,
             f"ranks (each needs a <gpu> among the reader's {MSCCL.max_elements} elements)"),
            ("nchannels", max(r.max_channels for r in RUNTIMES.values()),
             "channels (MAXCHANNELS of any runtime)"),
            ("nchunksperloop", MAX_CHUNKS,
             f"chunks ({MAX_RANKS} steps of at most {MSCCL.max_count - 1} chunks each through a rank)")):
        value = values[key]
        if value is not None and not 1 <= value <= high:
            raise MscclReadError(f"{key}=\"{value}\" but the runtime takes 1..{high} {what}",
                                 file=source)
    ngpus, nchunks = values["ngpus"] or 0, values["nchunksperloop"] or 0
    if ngpus * nchunks > MAX_SLOTS:
        raise MscclReadError(f"ngpus × nchunksperloop = {ngpus * nchunks:,} "
                             f"chunks; the verifier models at most {MAX_SLOTS:,}", file=source)


def _check_reach(algo: Algo) -> None:
    """Refuse steps that reach more chunks than the verifier can model in bounded memory."""
    declared = sum(max(g.chunks(b), 0) for g in algo.gpus for b in BUFFERS)
    if declared <= MAX_REACH:
        return   # what the steps can reach is smaller still
    total = 0
    for gpu in algo.gpus:
        for buf, end in _reach(gpu).items():
            if end > MAX_CHUNKS:
                raise MscclReadError(f"steps of gpu {gpu.id} reach {buf}[{end - 1}]: beyond "
                                     f"{MAX_CHUNKS:,} chunks, twice what a rank's steps can "
                                     "move", file=algo.source, line=gpu.line or None)
            total += end
    if total > MAX_REACH:
        raise MscclReadError(f"the steps reach {total:,} chunks of the GPUs' buffers in all; "
                             f"the verifier models at most {MAX_REACH:,}", file=algo.source)


def _reach(gpu: Gpu) -> dict[str, int]:
    """Per buffer, one past the furthest chunk a step touches inside the declared size
    (offsets outside it are findings that stop the symbolic run)."""
    end = dict.fromkeys(BUFFERS, 0)
    for tb in gpu.threadblocks:
        for st in tb.steps:
            span = min(max(st.cnt, 1), MSCCL.max_count)
            for buf, off in ((st.srcbuf, st.srcoff), (st.dstbuf, st.dstoff)):
                if buf in end and 0 <= off < gpu.chunks(buf):
                    end[buf] = max(end[buf], off + span)
    return end




def _split(text: str) -> Iterator[str]:
    """The lines of ``text`` with their ``\\n``, one at a time (``io.StringIO`` would hold a
    4-byte-per-character copy of a text of hundreds of MB)."""
    start, end, find = 0, len(text), text.find
    while start < end:
        stop = find("\n", start) + 1 or end
        yield text[start:stop]
        start = stop


def parse_text(text: str, source: str = "<string>") -> tuple[Algo, Findings]:
    """:func:`parse_msccl` of text already loaded; ``source`` names it in messages."""
    top, found = tokenize(text, source=source)
    algos = [e for e in top if e.name == "algo"]
    if not algos:
        found.append(finding("first-element-algo", f"no <algo> element (first is "
                             f"<{clip(top[0].name)}>)" if top else "no element at all", line=1))
        raise MscclSyntaxError(found)
    if top[0].name != "algo":
        found.append(finding("first-element-algo", f"the first element is "
                             f"<{clip(top[0].name)}>", line=top[0].line))
    for extra in top:
        if extra is not algos[0]:
            found.append(finding("ignored-element", f"<{clip(extra.name)}> outside the first "
                                 "<algo>", line=extra.line))
    header = _header(algos[0], found, source)
    gpus = tuple(_gpu(g, found) for g in _children(algos[0], "gpu", found))
    return Algo(**header, gpus=gpus, source=source), found


def _int(elem: RawElement, key: str, found: Findings, ctx: dict[str, int | None],
         *, bits: int = 32, required: bool = True) -> int | None:
    raw = elem.attrs.get(key)
    if raw is None:
        if required:
            found.append(finding("missing-attribute", f"<{elem.name}> has no {key}",
                                 line=elem.line, **ctx))
        return None
    value, rule = _number(raw)
    if rule is not None:
        found.append(finding(rule, f"{key}=\"{clip(raw)}\" reads as {value}",
                             line=elem.line, **ctx))
    half = 2 ** (bits - 1)
    return (value + half) % (2 * half) - half  # C assigns the long to an int: wrap around


@lru_cache(maxsize=1 << 12)
def _number(raw: str) -> tuple[int, str | None]:
    """What ``strtol`` reads from ``raw``, and the rule its text breaks (or None). Cached:
    a file repeats a few texts (``0``, ``-1``, ``01`` …) at every step."""
    if _DECIMAL.match(raw):
        return int(raw), None
    value = strtol(raw)
    if _OCTAL.match(raw.strip()):
        return value, "leading-zero"
    return value, None if _PLAIN_INT.match(raw) else "not-an-integer"


def _fields(elem: RawElement, kind: str, found: Findings,
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


def _children(elem: RawElement, name: str, found: Findings) -> list[RawElement]:
    for c in elem.children:
        if c.name != name:
            found.append(finding("ignored-element", f"<{clip(c.name)}> inside <{elem.name}>",
                                 line=c.line))
    return [c for c in elem.children if c.name == name]


def _header(elem: RawElement, found: Findings, source: str) -> dict[str, int | str | None]:
    """The :class:`Algo` fields given by the ``<algo>`` element's attributes; raises
    :class:`MscclReadError` for values beyond the runtime's limits."""
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
    _check_header(values, source)
    return dict(
        name=elem.attrs.get("name", ""), proto=elem.attrs.get("proto", ""),
        nchannels=values["nchannels"] or 0, nchunksperloop=values["nchunksperloop"] or 0,
        ngpus=values["ngpus"] or 0, coll=elem.attrs.get("coll", ""),
        inplace=values["inplace"] or 0, outofplace=values["outofplace"] or 0,
        min_bytes=values["minBytes"], max_bytes=values["maxBytes"])


def _gpu(elem: RawElement, found: Findings) -> Gpu:
    f = _fields(elem, "gpu", found, {})
    gid = int(f["id"])
    tbs = tuple(_tb(t, gid, found) for t in _children(elem, "tb", found))
    return Gpu(gid, int(f["i_chunks"]), int(f["o_chunks"]), int(f["s_chunks"]), tbs, elem.line)


def _tb(elem: RawElement, gid: int, found: Findings) -> Threadblock:
    f = _fields(elem, "tb", found, {"gpu": gid})
    tid = int(f["id"])
    steps = []
    for pos, s in enumerate(_children(elem, "step", found)):
        sf = _fields(s, "step", found, {"gpu": gid, "tb": tid, "step": pos})
        steps.append(Step(position=pos, line=s.line, **sf))  # type: ignore[arg-type]
    return Threadblock(tid, int(f["send"]), int(f["recv"]), int(f["chan"]), tuple(steps),
                       elem.line)
