"""Hostile MSCCL XML: refused in one line (exit 2) or checked, in bounded memory.

Each file is small but declares or carries what once made the verifier allocate
gigabytes; the subprocess runs under an address-space ceiling of 1 GiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from te_ccl.verify.msccl import MscclReadError, read_msccl, verify_msccl
from te_ccl.verify.msccl.reader import (
    MAX_CHUNKS,
    MAX_GENERAL_TEXT,
    MAX_RANKS,
    MAX_SLOTS,
    read_msccl_lenient,
)
from te_ccl.verify.msccl.stream import uncommented

from .xmltools import reference

CEILING = 1 << 30
RING = "azure_allgather_ring_8_1_1.xml"
ROOT = Path(__file__).resolve().parents[2]


_DRIVER = """
import contextlib, io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2)
from te_ccl.cli.main import main
results = []
for args in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as e:
            code = e.code
    results.append([code, out.getvalue(), err.getvalue()])
sys.stdout.write(json.dumps(results))
"""


def _capped(commands: list[list[str]], ceiling: int = CEILING) -> list[tuple[int, str, str]]:
    """Run teccl commands in one child process whose address space is capped."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(ceiling), json.dumps(commands)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [tuple(r) for r in json.loads(proc.stdout)]


def _ring() -> str:
    return reference(RING)


HEADERS = [
    (lambda t: t.replace('ngpus="8"', 'ngpus="1000000000"', 1), "ngpus="),
    (lambda t: t.replace('nchunksperloop="8"', 'nchunksperloop="2000000000"', 1),
     "nchunksperloop="),
    (lambda t: t.replace('nchannels="1"', 'nchannels="1000000000"', 1), "nchannels="),
    (lambda t: t.replace('ngpus="8"', 'ngpus="0"', 1), "ngpus="),
    (lambda t: t.replace('ngpus="8"', 'ngpus="-4"', 1), "ngpus="),
    (lambda t: t.replace('o_chunks="8"', 'o_chunks="2000000000"')
     .replace('dstoff="7"', 'dstoff="1999999990"', 1), "reach o[1999999990]"),
]
ENCODINGS = [
    (lambda t: t.encode("utf-16"), "UTF-16"),
    (lambda t: t.replace('name="', 'name="\xe9', 1).encode("latin-1"), "not UTF-8"),
    (lambda t: b"\0" * (3 << 20), "binary"),
]
HELP = [["--help"], ["verify", "--help"], ["compile", "--help"], ["topo", "list"]]


def test_hostile_files_are_one_line_and_help_fits_under_the_ceiling(tmp_path):
    """Headers beyond the runtime's limits, other encodings and binary data: exit 2 with
    one line naming the file (and the key) from verify and simulate; help-level
    commands: exit 0."""
    commands, expect = [], []
    for i, (change, words) in enumerate(HEADERS):
        path = tmp_path / f"h{i}.xml"
        path.write_text(change(_ring()))
        commands += [["verify", str(path)], ["simulate", "dgx1", str(path), "-s", "1MB"]]
        expect += [(path.name, words)] * 2
    for i, (content, words) in enumerate(ENCODINGS):
        path = tmp_path / f"e{i}.xml"
        path.write_bytes(content(_ring()))
        commands += [["verify", str(path)], ["simulate", "dgx1", str(path), "-s", "1MB"]]
        expect += [(path.name, words)] * 2
    results = _capped(commands + HELP)
    for (code, _, err), (name, words) in zip(results, expect, strict=False):
        assert code == 2 and err.count("\n") == 1 and name in err and words in err, err
    assert [code for code, _, _ in results[len(expect):]] == [0] * len(HELP)


def test_a_huge_comment_streams_past_under_the_ceiling(tmp_path):
    """128 MiB of comment on one line under half a GiB (reading it whole needs more)."""
    path = tmp_path / "c.xml"
    with path.open("w") as f:
        f.write("<!--")
        for _ in range(16):
            f.write("x" * (8 << 20))
        f.write("-->\n")
        f.write(_ring())
    [(code, out, err)] = _capped([["verify", str(path)]], CEILING // 2)
    assert code == 0 and "valid" in out, err


def test_the_limits_follow_the_runtime_record():
    from te_ccl.runtime_limits import MSCCL

    assert MAX_RANKS == MSCCL.max_elements - 2
    assert MAX_CHUNKS >= 2 * MAX_RANKS and MAX_SLOTS >= 1024 * 1024


def test_a_missing_header_attribute_stays_a_finding():
    report = verify_msccl(_ring().replace(' ngpus="8"', "", 1))
    assert "missing-attribute" in report.rules()


def test_comments_are_emptied_but_keep_their_lines():
    text = "".join(uncommented(iter(["<a/>\n<!-", "- one\ntwo --", "> <b/>\n<!-- open"])))
    assert text == "<a/>\n<!--\n--> <b/>\n<!--"
    report = verify_msccl(_ring().replace("\n  <gpu", "\n<!-- a\nb -->\n  <gpu", 1))
    assert report.valid


def test_legacy_files_read_leniently_with_one_warning(tmp_path):
    legacy = tmp_path / "legacy.xml"
    legacy.write_text(_ring().replace(' outofplace="0" minBytes="0" maxBytes="0"', "", 1))
    with pytest.raises(Exception, match="outofplace"):
        read_msccl(legacy)
    algo, warnings = read_msccl_lenient(legacy)
    assert algo.inplace == 1 and algo.outofplace == 0 and algo.max_bytes == 0
    assert len(warnings) == 1 and "--upgrade" in warnings[0]
    assert read_msccl_lenient(_ring())[1] == []
    with pytest.raises(MscclReadError):
        read_msccl_lenient(tmp_path / "missing.xml")


def test_large_files_outside_the_canonical_layout_are_refused(tmp_path):
    path = tmp_path / "wide.xml"
    with path.open("w") as f:
        f.write(_ring().replace("\n    <tb", "\n\t<tb", 1))   # one tab: not canonical
        f.write(" " * (MAX_GENERAL_TEXT + 1))
    with pytest.raises(MscclReadError, match="canonical layout"):
        verify_msccl(path)
