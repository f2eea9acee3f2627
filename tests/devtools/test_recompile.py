"""python -m devtools.recompile: the goals judged per row and the table written."""

from __future__ import annotations

from dataclasses import replace

import devtools.recompile as recompile
from devtools.recompile import CASES, Recompile, _markdown


def _row(warm_s: float, warm_finish_s: float) -> Recompile:
    return Recompile("dgx1", "without link g0:g1", 4.0, 1.0, 1.01, warm_s, warm_finish_s,
                     1.02, "first file: template previous-routes")


def test_a_row_meets_both_goals_or_none():
    assert _row(1.0, 1.02).met  # a quarter of the time, 2 % slower at most
    assert not _row(1.1, 1.0).met
    assert not _row(0.5, 1.03).met


def test_the_table_has_a_line_per_row_and_every_case_names_a_change():
    text = _markdown([_row(1.0, 1.0), replace(_row(2.0, 1.0), scratch_first_s=1.0,
                                              as_is_ratio=1.5)])
    assert text.count("\n") == 4 and "| 25% |" in text and "| 50% |" in text
    assert "| 0.00 s (0%) | - |" in text and "| 1.00 s (25%) | 1.5000 |" in text
    assert all(edit.without_links or edit.without_gpus or edit.scale_links for _, edit in CASES)


def test_the_note_of_the_compile_from_the_previous_file_is_shown_without_its_prefix():
    note = "--from: the previous file spliced does not stand (it replays at 1.200× the bound)"
    text = _markdown([replace(_row(1.0, 1.0), warm_note=note), _row(1.0, 1.0)])
    assert "| the previous file spliced does not stand (it replays at 1.200× the bound) |" \
        in text
    assert text.rstrip().endswith("| - |")


def test_the_written_file_s_check_is_shown_as_a_share_of_the_scratch_compile():
    row = replace(_row(1.0, 1.0), scratch_cpu_s=4.0, warm_cpu_s=2.0, warm_check_cpu_s=1.0)
    assert row.check_share == 0.25
    assert _markdown([row]).rstrip().endswith("| 1.00 s (25%) |")
    assert _row(1.0, 1.0).check_share is None  # no processor seconds from scratch


def test_the_floor_reads_the_previous_file_once_a_run_and_the_start_is_said_once(monkeypatch):
    """What any compile from the previous file spends at least: reading that file (where
    there is one), verifying and replaying the new one."""
    reads, verified = [], []
    monkeypatch.setattr(recompile.Path, "read_text", lambda self: "<algo/>")
    monkeypatch.setattr(recompile, "read_msccl", reads.append)
    monkeypatch.setattr(recompile, "verify_msccl", lambda text, read: verified.append(text))
    assert recompile._check("new.xml", None, "old.xml", runs=2) >= 0
    assert reads == ["old.xml"] * 2 and len(verified) == 2
    recompile._check("new.xml", None, None, runs=2)
    assert len(reads) == 2 and len(verified) == 4
    line = recompile._start_line(0.5)
    assert line.count("\n") == 2 and "0.50 s CPU" in line
