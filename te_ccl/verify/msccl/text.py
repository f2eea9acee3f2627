"""Tokenise MSCCL XML the way the runtime's hand-written reader does, and flag its quirks.

The runtime (msccl-executor-nccl ``msccl_parser.cc``) does not use an XML library: it
reads byte by byte, skips only spaces and newlines between tags, splits attributes on
single spaces, reads values up to the next double quote, and skips ``<!-- -->``
comments. This module builds a tree of :class:`RawElement` from the text and reports
every deviation from that narrow dialect as a finding, so a file that a real XML parser
accepts but the runtime does not is still caught. Structure it cannot recover from
(an unterminated tag, mismatched closing tags) raises :class:`MscclSyntaxError`; text
that is not XML at all, or nested deeper than :data:`MAX_DEPTH`, raises
:class:`MscclReadError` (a ``SpecError``, exit code 2).

>>> root, found = tokenize('<algo a="1">\\n  <gpu id="010"/>\\n</algo>\\n')
>>> root[0].name, root[0].children[0].attrs, list(found)
('algo', {'id': '010'}, [])
>>> strtol("010"), strtol("0x1f"), strtol("08"), strtol("-3"), strtol("12ab")
(8, 31, 0, -3, 12)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from te_ccl.errors import SpecError, VerificationError
from te_ccl.verify.msccl.findings import Finding, Findings, clip, finding

__all__ = ["RawElement", "MscclReadError", "MscclSyntaxError", "tokenize", "strtol",
           "MAX_ATTRS", "MAX_DEPTH", "parse_tag"]

MAX_ATTRS = 16      # MSCCL_MAX_ATTR_COUNT
MAX_NAME = 254      # names of MSCCL_MAX_STR_LEN-1 characters fail
MAX_VALUE = 255     # values are copied unchecked into a 256-byte buffer
MAX_DEPTH = 8
"""Nesting the tokenizer follows: MSCCL XML is 4 deep (algo/gpu/tb/step), and anything
deeper sits inside elements the runtime skips, so twice that is ample. Deeper input is
refused at the first element past it, before the rest is read into a tree."""

_TOKEN = re.compile(r"<!--.*?-->|<!--.*|<[^<>]*>?|[^<]+", re.S)
_NAME = r"[^\s=\"'/<>]+"
_STRICT_OPEN = re.compile(rf'<{_NAME}(?: {_NAME}="[^"]*")*/?>\Z')
_STRICT_CLOSE = re.compile(rf"</{_NAME}>\Z")
_LENIENT_OPEN = re.compile(rf"<\s*({_NAME})((?:\s+{_NAME}\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*(/?)\s*>\Z")
_LENIENT_CLOSE = re.compile(rf"</\s*({_NAME})\s*>\Z")
_ATTR = re.compile(rf"({_NAME})\s*=\s*(\"[^\"]*\"|'[^']*')")
_DIGITS = {8: re.compile("[0-7]*"), 10: re.compile("[0-9]*"), 16: re.compile("[0-9a-fA-F]*")}


class MscclReadError(SpecError):
    """The input cannot be read as an MSCCL XML file at all (missing, binary, not XML)."""


class MscclSyntaxError(VerificationError):
    """The text is XML-like but its structure cannot be recovered; ``findings`` say why."""

    def __init__(self, findings: Iterable[Finding]) -> None:
        self.findings = findings if isinstance(findings, Findings) else Findings() + findings
        super().__init__("; ".join(f"line {f.line}: {f.message}" for f in self.findings
                                   if f.severity == "error") or "unreadable MSCCL XML")


@dataclass(slots=True)
class RawElement:
    """An element as the runtime sees it: name, first-16 attributes (first occurrence wins)."""

    name: str
    attrs: dict[str, str]
    line: int
    children: list[RawElement] = field(default_factory=list)


def strtol(text: str) -> int:
    """C ``strtol(text, NULL, 0)``: base from the prefix, stops at the first bad digit."""
    s = text.lstrip(" \t\n\r\f\v")
    sign = -1 if s[:1] == "-" else 1
    if s[:1] in "+-" and s:
        s = s[1:]
    if s[:2].lower() == "0x" and s[2:3] and s[2:3] in "0123456789abcdefABCDEF":
        base, s = 16, s[2:]
    elif s[:1] == "0":
        base = 8
    else:
        base = 10
    digits = _DIGITS[base].match(s).group().lstrip("0")
    if len(digits) > 22:   # beyond a long in any of the bases: no need to convert it
        return -(2**63) if sign < 0 else 2**63 - 1
    value = sign * int(digits, base) if digits else 0
    return max(-(2**63), min(2**63 - 1, value))  # strtol saturates at LONG_MIN/LONG_MAX


def tokenize(text: str, *, source: str = "<string>") -> tuple[list[RawElement], Findings]:
    """Top-level elements and the textual findings; raises on unrecoverable structure
    and on nesting deeper than :data:`MAX_DEPTH`."""
    stripped = text.lstrip(" \t\r\n")
    if not stripped.startswith("<"):
        what = "empty" if not stripped else f"starts with {stripped[:20]!r}"
        raise MscclReadError(f"not an XML file ({what})", file=source)
    found = Findings()
    top: list[RawElement] = []
    stack: list[RawElement] = []
    line, last_tag_line = 1, 0
    for m in _TOKEN.finditer(text):
        tok = m.group()
        start_line = line
        line += tok.count("\n")
        if not tok.startswith("<"):
            _check_between(tok, start_line, found)
            continue
        if start_line == last_tag_line:
            found.append(finding("one-tag-per-line", "a second tag starts on this line",
                                 line=start_line))
        last_tag_line = line
        if tok.startswith("<!--"):
            if not tok.endswith("-->"):
                _fatal(found, "unbalanced-tags", "unterminated comment", start_line)
            continue
        elem, closing, single = parse_tag(tok, start_line, found)
        if elem is None:
            continue
        if closing:
            if not stack or stack[-1].name != elem.name:
                opened = f"<{clip(stack[-1].name)}> of line {stack[-1].line}" if stack \
                    else "nothing"
                _fatal(found, "unbalanced-tags", f"</{clip(elem.name)}> closes {opened}",
                       start_line)
            stack.pop()
            continue
        if len(stack) == MAX_DEPTH:
            raise MscclReadError(f"<{clip(elem.name)}> is nested {MAX_DEPTH + 1} deep; MSCCL "
                                 "XML nests 4 (algo/gpu/tb/step) and the verifier reads at "
                                 f"most {MAX_DEPTH}", file=source, line=start_line)
        (stack[-1].children if stack else top).append(elem)
        if not single:
            stack.append(elem)
    if stack:
        _fatal(found, "unbalanced-tags", f"<{clip(stack[-1].name)}> is never closed",
               stack[-1].line)
    return top, found


def _fatal(found: Findings, rule: str, detail: str, line: int) -> None:
    found.append(finding(rule, detail, line=line))
    raise MscclSyntaxError(found)


def _check_between(tok: str, line: int, found: Findings) -> None:
    """Text between tags: the runtime skips only ' ', '\\n' and '\\r'."""
    for i, row in enumerate(tok.split("\n")):
        rest = row.replace(" ", "").replace("\r", "")
        if not rest:
            continue
        if set(rest) <= set("\t\f\v"):
            found.append(finding("tab-before-tag", "whitespace other than spaces before a tag",
                                 line=line + i))
        else:
            found.append(finding("text-outside-tags", f"text {rest.strip()[:30]!r} between tags",
                                 line=line + i))


def parse_tag(tok: str, line: int, found: Findings) -> tuple[RawElement | None, bool, bool]:
    """(element, is_closing, is_self_closing); None for declarations and other skipped tags."""
    if not tok.endswith(">"):
        _fatal(found, "malformed-tag", f"tag {tok[:40]!r} has no closing '>'", line)
    if tok.startswith("<?"):
        found.append(finding("xml-declaration", f"{tok[:30]!r}", line=line))
        return None, False, False
    if tok.startswith("<!"):
        found.append(finding("malformed-tag", f"{tok[:30]!r} is not an element", line=line))
        return None, False, False
    multiline = "\n" in tok or "\r" in tok
    if multiline:
        found.append(finding("newline-in-tag", "the tag spans several lines", line=line))
    closing = tok.startswith("</")
    strict = (_STRICT_CLOSE if closing else _STRICT_OPEN).match(tok)
    m = (_LENIENT_CLOSE if closing else _LENIENT_OPEN).match(tok)
    if m is None:
        _fatal(found, "malformed-tag", f"cannot read tag {tok[:60]!r}", line)
    if not strict and not multiline:
        if "='" in tok.replace(" ", "") and not closing:
            found.append(finding("double-quotes", "an attribute value is in single quotes",
                                 line=line))
        else:
            found.append(finding("attribute-spacing", f"irregular spacing in {tok[:50]!r}",
                                 line=line))
    name = m.group(1)
    if len(name) >= MAX_NAME:
        found.append(finding("name-too-long", f"element name of {len(name)} characters",
                             line=line))
    if closing:
        return RawElement(name, {}, line), True, False
    return RawElement(name, _attributes(m.group(2), line, found), line), False, m.group(3) == "/"


def _attributes(text: str, line: int, found: Findings) -> dict[str, str]:
    pairs = [(k, v[1:-1]) for k, v in _ATTR.findall(text)]
    if len(pairs) > MAX_ATTRS:
        ignored = clip(", ".join(k for k, _ in pairs[MAX_ATTRS:]), 80)
        found.append(finding("too-many-attributes", f"{len(pairs)} attributes; {ignored} "
                             "ignored", line=line))
        pairs = pairs[:MAX_ATTRS]
    attrs: dict[str, str] = {}
    for key, value in pairs:
        if len(key) >= MAX_NAME or len(value) >= MAX_VALUE:
            found.append(finding("name-too-long", f"attribute {key[:30]} is "
                                 f"{max(len(key), len(value))} characters long", line=line))
        if key in attrs:
            found.append(finding("duplicate-attribute", f"{clip(key)} given twice", line=line))
            continue
        attrs[key] = value
    return attrs
