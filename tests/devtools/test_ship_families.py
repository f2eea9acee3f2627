"""Size-ranged families: contiguous ranges, both buffer modes, verified files, an index
that matches them, and a size budget."""

from __future__ import annotations

import csv
from itertools import groupby
from pathlib import Path

import pytest

from devtools.ship_families import FIELDS, MACHINES, ship_families, ship_family
from te_ccl.compiler import SolveParams
from te_ccl.verify.msccl import verify_msccl

SHIPPED = Path(__file__).resolve().parents[2] / "schedules" / "families"
KiB, MiB = 1 << 10, 1 << 20
FAST = SolveParams(time_limit_s=5, threads=1)


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _contiguous(rows: list[dict], low: int, high: int) -> None:
    assert int(rows[0]["min_bytes"]) == low and int(rows[-1]["max_bytes"]) == high
    for a, b in zip(rows, rows[1:], strict=False):
        assert int(b["min_bytes"]) == int(a["max_bytes"]) + 1


def test_a_family_in_both_modes_shares_one_directory(tmp_path):
    rows = ship_families(tmp_path, sizes="64KiB..1MiB", machines=("fc8",), kinds=("allgather",),
                         time_limit_s=5)
    assert {r["inplace"] for r in rows} == {False, True}
    assert all(r["status"] == "ok" for r in rows)
    index = _rows(tmp_path / "index.csv")
    assert list(index[0]) == list(FIELDS) and len(index) == len(rows)
    for inplace, family in groupby(index, key=lambda r: r["inplace"]):
        family = list(family)
        _contiguous(family, 64 * KiB, MiB)
        for r in family:
            report = verify_msccl(tmp_path / r["file"])
            assert report.valid and report.algo.inplace == (inplace == "True")
            assert (report.algo.min_bytes, report.algo.max_bytes) == \
                (int(r["min_bytes"]), int(r["max_bytes"]))


@pytest.mark.slow
def test_a_family_over_the_size_budget_is_skipped_and_leaves_no_file(tmp_path):
    rows = ship_family("fc8", "allgather", False, tmp_path, 64 * KiB, MiB, FAST,
                       max_file_bytes=16)
    assert [r["status"] for r in rows] == ["skipped"] and "size budget" in rows[0]["reason"]
    assert not list((tmp_path / "fc8").iterdir())


def test_a_rooted_collective_is_refused_as_a_family(tmp_path):
    rows = ship_family("fc8", "broadcast", False, tmp_path, 64 * KiB, MiB, FAST)
    assert rows[0]["status"] == "skipped" and "root" in rows[0]["reason"]


def _shipped() -> list[dict]:
    index = SHIPPED / "index.csv"
    return _rows(index) if index.is_file() else []


def test_the_shipped_families_cover_every_machine_and_match_their_files():
    rows = _shipped()
    assert {r["topology"] for r in rows} == set(MACHINES), \
        "schedules/families is stale: run `make schedules`"
    key = lambda r: (r["topology"], r["collective"], r["inplace"])  # noqa: E731
    for _, family in groupby(sorted(rows, key=key), key=key):
        family = sorted(family, key=lambda r: int(r["min_bytes"] or 0))
        if family[0]["status"] == "ok":
            _contiguous(family, int(family[0]["min_bytes"]), int(family[-1]["max_bytes"]))
            assert all((SHIPPED / r["file"]).is_file() for r in family)
        else:
            assert len(family) == 1 and family[0]["reason"]


@pytest.mark.parametrize("name", [r["file"] for r in _shipped() if r["status"] == "ok"])
def test_shipped_family_xml_verifies(name):
    assert verify_msccl(SHIPPED / name).valid
