"""The runtime reader's textual rules, strtol, and the errors of ``read_msccl``."""

from __future__ import annotations

from pathlib import Path

import pytest

from te_ccl.errors import SpecError, VerificationError
from te_ccl.verify.msccl import MscclFormatError, MscclReadError, MscclSyntaxError, read_msccl
from te_ccl.verify.msccl.text import strtol
from te_ccl.verify.msccl.verify import verify_msccl

from .xmltools import reference

RING = "azure_allgather_ring_8_1_1.xml"


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("12", 12), ("-1", -1), ("010", 8), ("08", 0), ("0x10", 16), ("0X1f", 31),
    (" 7", 7), ("+3", 3), ("12abc", 12), ("abc", 0), ("", 0), ("0x", 0), ("-0x10", -16),
    ("99999999999999999999", 2**63 - 1),
])
def test_strtol_matches_c(text: str, value: int) -> None:
    assert strtol(text) == value


def _text_rules(text: str) -> set[str]:
    return verify_msccl(text).rules()


@pytest.mark.parametrize("change, rule", [
    (lambda t: '<?xml version="1.0"?>\n' + t, "xml-declaration"),
    (lambda t: t.replace('<tb id="0" send="1"', "<tb id='0' send=\"1\"", 1), "double-quotes"),
    (lambda t: t.replace('<tb id="0" send="1"', '<tb id="0"  send="1"', 1), "attribute-spacing"),
    (lambda t: t.replace('<tb id="0" send="1"', '<tb id="0"\n send="1"', 1), "newline-in-tag"),
    (lambda t: t.replace("</tb>\n  </gpu>", "</tb></gpu>", 1), "one-tag-per-line"),
    (lambda t: t.replace("\n  <gpu", "\nhello\n  <gpu", 1), "text-outside-tags"),
    (lambda t: "<!-- c -->\n<foo/>\n" + t, "first-element-algo"),
    (lambda t: t.replace('<tb id="0" send="1"', '<tb id="0" send="1" x="1" x="2"', 1),
     "duplicate-attribute"),
    (lambda t: t.replace("<algo name=", "<algo name=\"" + "n" * 300 + "\" n2=", 1),
     "name-too-long"),
    (lambda t: t.replace(' cnt="1"', ' cnt="1x"', 1), "not-an-integer"),
    (lambda t: t.replace(' minBytes="0"', "", 1), "missing-algo-attribute"),
    (lambda t: t.replace(' hasdep="0"', "", 1), "missing-attribute"),
    (lambda t: t.replace('proto="LL128"', 'proto="LL64"', 1), "proto"),
    (lambda t: t.replace('type="rcs"', 'type="rcx"', 1), "step-type"),
    (lambda t: t.replace('srcbuf="o"', 'srcbuf="x"', 1), "buffer"),
    (lambda t: t.replace('s_chunks="0"', 's_chunks="-1"', 1), "scratch-chunks"),
    (lambda t: t.replace('recv="7"', 'recv="0"', 1), "peer"),
    (lambda t: t.replace('chan="0"', 'chan="40"', 1), "channel-range"),
    (lambda t: t.replace(' cnt="1"', ' cnt="72"', 1), "count-range"),
    (lambda t: t.replace('send="1" recv="7"', 'send="-1" recv="7"', 1), "send-without-peer"),
    (lambda t: t.replace('depid="-1" deps="-1" hasdep="0"', 'depid="-1" deps="-1" hasdep="2"', 1),
     "hasdep"),
    (lambda t: t.replace('<gpu id="0" i_chunks="0"', '<gpu id="0" i_chunks="0" x="0"', 1)
     .replace("<tb id", "<foo/>\n    <tb id", 1), "ignored-element"),
])
def test_textual_and_parser_rules(change, rule: str) -> None:
    found = _text_rules(change(reference(RING)))
    assert rule in found


def test_comments_before_algo_are_fine() -> None:
    assert verify_msccl("<!-- a -->\n<!-- b -->\n" + reference(RING)).valid


@pytest.mark.parametrize("text", [
    '<algo name="x">\n  <gpu id="0">\n</algo>\n',   # mismatched closing tag
    '<algo name="x">\n  <gpu id="0"/>\n',           # never closed
    '<algo name="x"\n',                             # unterminated tag
])
def test_unrecoverable_structure_is_invalid_not_unreadable(text: str) -> None:
    report = verify_msccl(text)
    assert not report.valid and report.algo is None
    assert report.rules() & {"unbalanced-tags", "malformed-tag", "newline-in-tag"}
    with pytest.raises(MscclSyntaxError):
        read_msccl(text)


def test_read_msccl_errors(tmp_path: Path) -> None:
    with pytest.raises(MscclReadError):
        read_msccl(tmp_path / "missing.xml")
    (tmp_path / "bin.xml").write_bytes(b"<algo\0\1")
    with pytest.raises(MscclReadError, match="binary"):
        read_msccl(tmp_path / "bin.xml")
    (tmp_path / "plain.xml").write_text("just text\n")
    with pytest.raises(MscclReadError, match="not an XML file"):
        read_msccl(tmp_path / "plain.xml")
    assert issubclass(MscclReadError, SpecError) and issubclass(MscclFormatError, VerificationError)
    with pytest.raises(MscclFormatError, match="tab"):
        read_msccl(reference(RING).replace("\n    <tb", "\n\t<tb", 1))


def test_values_read_like_the_runtime() -> None:
    algo = read_msccl(reference(RING).replace('<tb id="0" send="1"', '<tb id="0x0" send="1"', 1))
    assert algo.gpus[0].threadblocks[0].id == 0
    algo, = [verify_msccl(reference(RING).replace(' dstoff="7"', ' dstoff="07"', 1)).algo]
    assert algo.gpus[0].threadblocks[0].steps[1].dstoff == 7
