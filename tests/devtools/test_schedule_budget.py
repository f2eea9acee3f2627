"""The size budget of schedules/: a combination with a file over it is recorded as skipped."""

from __future__ import annotations

from devtools.ship_schedules import within_budget


def _entry(tmp_path, sizes: dict[str, int]) -> dict:
    (tmp_path / "box").mkdir()
    for name, size in sizes.items():
        (tmp_path / "box" / name).write_bytes(b"x" * size)
    return {"topology": "box", "collective": "alltoall", "ngpus": 8, "status": "ok",
            "files": [f"box/{n}" for n in sizes]}


def test_within_budget_keeps_the_entry(tmp_path):
    entry = _entry(tmp_path, {"alltoall.xml": 1000, "alltoall.json": 10})
    assert within_budget(entry, tmp_path, 1024) is entry


def test_over_budget_is_skipped_and_its_files_removed(tmp_path):
    entry = _entry(tmp_path, {"alltoall.xml": 3 << 20, "alltoall.inplace.xml": 10})
    out = within_budget(entry, tmp_path, 256 << 10)
    assert out["status"] == "skipped" and "box/alltoall.xml is 3.0 MiB" in out["reason"]
    assert "256 KiB per file" in out["reason"]
    assert not any((tmp_path / "box").iterdir())
