"""`teccl verify` stays bounded on hostile files: the verdict first, a few findings per
rule and a count of the rest, nesting and size refused before a tree is built.

Each file is generated here (at most 16 MB) and checked by counts: the exit code, the
verdict on the first line, the number of output lines, exact per-rule counts in
``--json``. Time and memory are not asserted (they were measured by hand; docs/verify.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from te_ccl.verify.msccl import MscclReadError, verify_msccl
from te_ccl.verify.msccl.findings import KEEP, Findings, finding
from te_ccl.verify.msccl.reader import MAX_GENERAL_TAGS, MAX_GENERAL_TEXT
from te_ccl.verify.msccl.text import MAX_DEPTH

from .synthetic import ring_allgather

MAX_LINES = 100
_RING = "\n".join(ring_allgather(2, 1, 1)) + "\n"
_HEAD, _BODY = _RING.split("\n", 1)
_GPU = '  <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0">\n'
_TB = '    <tb id="0" send="1" recv="-1" chan="0">\n'
_TAIL = "    </tb>\n  </gpu>\n</algo>\n"


def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    assert path.stat().st_size <= 16 << 20
    return path


def _nested(depth: int) -> str:
    """The valid ring with ``depth - 1`` elements nested under ``<algo>`` (they are
    skipped by the runtime, so only warnings)."""
    inner = "".join(f"<x{i}>\n" for i in range(depth - 1))
    outer = "".join(f"</x{i}>\n" for i in reversed(range(depth - 1)))
    return f"{_HEAD}\n{inner}{outer}{_BODY}"


def _wrong_steps(n: int) -> str:
    """``n`` steps in the canonical layout, each with a wrong position and type."""
    step = ('      <step s="{}" type="zz" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" '
            'depid="-1" deps="-1" hasdep="0"/>\n')
    return _HEAD + "\n" + _GPU + _TB + "".join(step.format(i + 1) for i in range(n)) + _TAIL


def _huge_name() -> str:
    """The valid ring with an algorithm name that fills the file up to 16 MiB."""
    return _RING.replace('name="', 'name="' + "y" * ((16 << 20) - len(_RING) - 1), 1)


BOMB = ('<?xml version="1.0"?>\n<!DOCTYPE b [\n <!ENTITY a "aaaaaaaaaa">\n'
        ' <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">\n <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;">\n'
        ']>\n' + _RING.replace('name="', 'name="&c;', 1))
XXE = ('<?xml version="1.0"?>\n<!DOCTYPE x [ <!ENTITY e SYSTEM "file:///etc/passwd"> ]>\n'
       + _RING.replace('name="', 'name="&e;', 1))

FINDINGS = {   # name: (content, (a rule it breaks, how often))
    "wrong_steps": (_wrong_steps(20_000), ("step-type", 20_000)),
    "huge_name": (_huge_name(), ("name-too-long", 1)),
    "depth_at_limit": (_nested(MAX_DEPTH), ("ignored-element", 1)),
    "entity_bomb": (BOMB, ("xml-declaration", 1)),
    "xxe": (XXE, ("xml-declaration", 1)),
}
REFUSED = {   # name: (content, words of the one line)
    "nested_200k": ("<x>" * 200_000 + "</x>" * 200_000, f"more than {MAX_GENERAL_TAGS:,} tags"),
    "nested_50k": ("<x>" * 50_000 + "</x>" * 50_000, f"nested {MAX_DEPTH + 1} deep"),
    "past_the_depth": (_nested(MAX_DEPTH + 1), f"nested {MAX_DEPTH + 1} deep"),
    "sibling_steps_200k": (_HEAD + "\n" + _GPU + _TB + '<step s="1" type="zz"/>\n' * 200_000
                           + _TAIL, f"more than {MAX_GENERAL_TAGS:,} tags"),
    "million_gpus": (_HEAD + "\n" + "<gpu/>\n" * 1_000_000 + "</algo>\n",
                     f"more than {MAX_GENERAL_TAGS:,} tags"),
    "not_utf8": (_RING.replace('name="', 'name="\xe9', 1).encode("latin-1"), "not UTF-8"),
    "empty": ("", "empty"),
    "binary": (bytes(range(256)) * 4096, "binary"),
}


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_findings_come_after_the_verdict_and_stay_few(teccl, tmp_path, name):
    content, (rule, count) = FINDINGS[name]
    path = _write(tmp_path, f"{name}.xml", content)
    code, out, err = teccl("verify", str(path))
    lines = out.splitlines()
    assert code == (0 if name == "depth_at_limit" else 1), err
    assert lines[0].startswith(f"{path}: ") and " — " in lines[0] and len(lines) <= MAX_LINES
    assert len(out) < 40 * 1024 and rule in out
    code, out, _ = teccl("verify", "--json", str(path))
    data = json.loads(out)
    assert len(out) < 40 * 1024
    assert data["counts"][rule] == count
    listed = [f for f in data["findings"] if f["rule"] == rule]
    assert len(listed) == min(count, KEEP)
    assert data["truncated"].get(rule, 0) == count - len(listed)
    assert data["errors"] + data["warnings"] == sum(data["counts"].values())


def test_many_wrong_steps_print_a_count_per_rule(teccl, tmp_path):
    path = _write(tmp_path, "w.xml", _wrong_steps(20_000))
    code, out, _ = teccl("verify", str(path))
    lines = out.splitlines()
    errors = verify_msccl(path).error_count
    assert code == 1 and errors > 40_000 and lines[0].endswith(f"invalid: {errors:,} error(s) (msccl limits)")
    assert sum("step-type: " in line for line in lines) == KEEP
    assert any(line.endswith(f"… and {20_000 - KEEP:,} more step-type") for line in lines)
    assert lines[-1].startswith("note: not executed")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_hostile_files_are_refused_in_one_line(teccl, tmp_path, name):
    content, words = REFUSED[name]
    path = _write(tmp_path, f"{name}.xml", content)
    for command in (["verify", str(path)], ["simulate", "dgx1", str(path), "-s", "1MB"]):
        code, out, err = teccl(*command)
        assert code == 2 and out == "", (command, out)
        assert err.count("\n") == 1 and path.name in err and words in err, err


def test_a_simulated_file_names_the_full_count(teccl, tmp_path):
    path = _write(tmp_path, "w.xml", _wrong_steps(2_000))
    code, out, err = teccl("simulate", "dgx1", str(path), "-s", "1MB")
    assert code == 1 and err.count("\n") == 1, err
    assert f"and {verify_msccl(path).error_count - 1:,} more: teccl verify" in err


def test_text_has_the_bounds_of_a_file():
    """What the compile verifies (its own XML, as text) meets the same refusals."""
    with pytest.raises(MscclReadError, match="deep"):
        verify_msccl(_nested(MAX_DEPTH + 1))
    with pytest.raises(MscclReadError, match="tags"):
        verify_msccl(_HEAD + "\n" + "<gpu/>\n" * (MAX_GENERAL_TAGS + 1) + "</algo>\n")
    with pytest.raises(MscclReadError, match="MiB"):
        verify_msccl(_RING.replace("<algo ", "<algo " + " " * MAX_GENERAL_TEXT, 1))
    report = verify_msccl(_wrong_steps(200))
    assert report.counts["step-type"] == 200 and len(report.errors) < report.error_count


def test_a_huge_number_reads_as_strtol_saturates():
    text = _RING.replace('<gpu id="0"', '<gpu id="' + "9" * 5000 + '"', 1)
    report = verify_msccl(text)
    assert "gpu-ids" in report.rules()
    assert all(len(f.message) < 1000 for f in report.findings)


_RULES = ["gpu-ids", "step-type", "ignored-element", "deadlock"]


@given(st.lists(st.tuples(st.sampled_from(_RULES), st.integers(0, 3)), max_size=40),
       st.lists(st.integers(0, 40), max_size=4))
def test_findings_merged_in_parts_equal_findings_gathered_at_once(items, cuts):
    """However the checks split their findings, the kept ones and the counts agree."""
    every = [finding(rule, "x", gpu=g) for rule, g in items]
    whole = Findings() + every
    parts, start = Findings(), 0
    for cut in sorted(cuts) + [len(every)]:
        part = Findings()
        part += every[start:max(start, cut)]
        parts += part
        start = max(start, cut)
    assert parts == whole
    assert whole.counts == {r: sum(1 for f in every if f.rule == r) for r in whole.counts}
    assert list(whole) == [f for i, f in enumerate(every)
                           if sum(1 for g in every[:i] if g.rule == f.rule) < KEEP]
