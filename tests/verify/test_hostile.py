"""Hostile MSCCL XML: refused in one line (exit 2) or checked, in bounded memory.

Each file is small but declares or carries what once made the verifier allocate
gigabytes; the subprocess runs under an address-space ceiling of 1 GiB.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from te_ccl.verify.msccl import MscclReadError, read_msccl, verify_msccl
from te_ccl.verify.msccl.reader import MAX_CHUNKS, MAX_RANKS, MAX_SLOTS, read_msccl_lenient
from te_ccl.verify.msccl.stream import uncommented

from .xmltools import reference

CEILING = 1 << 30
RING = "azure_allgather_ring_8_1_1.xml"
ROOT = Path(__file__).resolve().parents[2]


def _capped_run(*args: str, ceiling: int = CEILING) -> subprocess.CompletedProcess:
    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "te_ccl", *args], capture_output=True,
                          text=True, env=env, preexec_fn=capped, timeout=120)


def _verify_capped(path: Path, ceiling: int = CEILING) -> subprocess.CompletedProcess:
    return _capped_run("verify", str(path), ceiling=ceiling)


@pytest.mark.parametrize("args", [("--help",), ("verify", "--help"), ("compile", "--help"),
                                  ("topo", "list")])
def test_help_level_commands_fit_under_the_ceiling(args):
    proc = _capped_run(*args)
    assert proc.returncode == 0, proc.stderr


def _ring() -> str:
    return reference(RING)


@pytest.mark.parametrize(("change", "key"), [
    (lambda t: t.replace('ngpus="8"', 'ngpus="1000000000"', 1), "ngpus"),
    (lambda t: t.replace('nchunksperloop="8"', 'nchunksperloop="2000000000"', 1),
     "nchunksperloop"),
    (lambda t: t.replace('nchannels="1"', 'nchannels="1000000000"', 1), "nchannels"),
    (lambda t: t.replace('ngpus="8"', 'ngpus="0"', 1), "ngpus"),
    (lambda t: t.replace('ngpus="8"', 'ngpus="-4"', 1), "ngpus"),
])
def test_headers_beyond_the_runtime_are_refused_under_the_ceiling(tmp_path, change, key):
    path = tmp_path / "h.xml"
    path.write_text(change(_ring()))
    proc = _verify_capped(path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"{key}=" in proc.stderr and "h.xml" in proc.stderr


@pytest.mark.parametrize(("content", "words"), [
    (lambda t: t.encode("utf-16"), "UTF-16"),
    (lambda t: t.replace('name="', 'name="\xe9', 1).encode("latin-1"), "not UTF-8"),
    (lambda t: b"\0" * (3 << 20), "binary"),
])
def test_encodings_and_binary_are_one_line(tmp_path, content, words):
    path = tmp_path / "e.xml"
    path.write_bytes(content(_ring()))
    proc = _verify_capped(path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr


def test_a_huge_comment_streams_past_under_the_ceiling(tmp_path):
    """128 MiB of comment on one line under half a GiB (reading it whole needs more)."""
    path = tmp_path / "c.xml"
    with path.open("w") as f:
        f.write("<!--")
        for _ in range(16):
            f.write("x" * (8 << 20))
        f.write("-->\n")
        f.write(_ring())
    proc = _verify_capped(path, CEILING // 2)
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


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
