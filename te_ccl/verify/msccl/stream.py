"""Read an XML file as text in bounded memory, whatever the file holds.

The file is read block by block: a NUL byte (binary data, ``/dev/zero``, UTF-16 without
a byte-order mark) or a UTF-16 byte-order mark is refused at the block that shows it,
UTF-8 is checked as it arrives, and comment text is dropped as it streams past (only its
newlines are kept, so line numbers stay right and a comment of gigabytes costs one
character per line). The tokenizers never look inside comments, so they see the same
structure.

>>> "".join(uncommented(iter(["<a/>\\n<!-- x", "y\\nz -", "-> <b/>\\n"])))
'<a/>\\n<!--\\n--> <b/>\\n'
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from te_ccl.outputs import check_input_file
from te_ccl.verify.msccl.text import MscclReadError

__all__ = ["decoded", "uncommented", "lines_of", "BLOCK"]

BLOCK = 1 << 20


def decoded(path: str | Path) -> Iterator[str]:
    """The file's text in pieces of about :data:`BLOCK` characters, comments emptied."""
    source = str(Path(path))
    check_input_file(path)
    try:
        with open(path, "rb") as f:
            yield from uncommented(_blocks(f, source))
    except OSError as e:
        raise MscclReadError(f"cannot read the file ({e.strerror or e})", file=source) from e


def _blocks(f: BinaryIO, source: str) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    while True:
        block = f.read(BLOCK)
        if offset == 0 and block[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise MscclReadError("UTF-16 text; the runtime reads 8-bit text: convert it to "
                                 "UTF-8 (iconv -f UTF-16 -t UTF-8)", file=source)
        nul = block.find(b"\0")
        if nul >= 0:
            raise MscclReadError(f"binary file, not MSCCL XML (a NUL byte at offset "
                                 f"{offset + nul})", file=source)
        try:
            text = decoder.decode(block, final=not block)
        except UnicodeDecodeError as e:
            raise MscclReadError(f"not UTF-8 text (byte {offset + e.start}); the runtime "
                                 "reads ASCII or UTF-8", file=source) from None
        if text:
            yield text
        if not block:
            return
        offset += len(block)


def uncommented(pieces: Iterator[str]) -> Iterator[str]:
    """``pieces`` with each comment's text replaced by its newlines (``<!--`` and ``-->``
    kept; an unterminated comment stays unterminated)."""
    inside, carry = False, ""
    for piece in pieces:
        text, pos, out = carry + piece, 0, []
        while True:
            if inside:
                end = text.find("-->", pos)
                if end < 0:
                    keep = max(pos, len(text) - 2)   # a "--" whose ">" is in the next piece
                    out.append("\n" * text.count("\n", pos, keep))
                    carry = text[keep:]
                    break
                out.append("\n" * text.count("\n", pos, end) + "-->")
                pos, inside = end + 3, False
            else:
                start = text.find("<!--", pos)
                if start < 0:
                    keep = max(pos, len(text) - 3)   # a "<!-" whose "-" is in the next piece
                    out.append(text[pos:keep])
                    carry = text[keep:]
                    break
                out.append(text[pos:start + 4])
                pos, inside = start + 4, True
        yield "".join(out)
    yield "\n" * carry.count("\n") if inside else carry


def lines_of(pieces: Iterator[str], longest: int) -> Iterator[str]:
    """The lines of ``pieces`` with their ``\\n``; ends early at a line longer than
    ``longest`` (a caller reading canonical files takes that as "not canonical")."""
    parts: list[str] = []
    size = 0
    for piece in pieces:
        if "\n" not in piece:
            parts.append(piece)
            size += len(piece)
            if size > longest:
                return
            continue
        first, *lines, last = piece.split("\n")
        yield "".join(parts) + first + "\n"
        for line in lines:
            yield line + "\n"
        parts, size = [last], len(last)
    if size:
        yield "".join(parts)
