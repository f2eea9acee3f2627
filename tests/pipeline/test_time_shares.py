"""The shares of a compile's time live in one place, and the docs' table of them is theirs."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from te_ccl.deadline import SHARES, TimeShares

DOCS = Path(__file__).parents[2] / "docs" / "solving.md"


def shares_table(shares: TimeShares) -> str:
    """The markdown table docs/solving.md shows, one row per field of :class:`TimeShares`."""
    rows = ["| `SHARES.` | fraction | taken in | what it trades |", "|---|---|---|---|"]
    rows += [f"| `{f.name}` | {getattr(shares, f.name):g} | `te_ccl/{f.metadata['stage']}` | "
             f"{f.metadata['trades']} |" for f in fields(shares)]
    return "\n".join(rows)


def test_the_docs_table_of_shares_is_the_one_in_deadline():
    assert shares_table(SHARES) in DOCS.read_text(), (
        "docs/solving.md's table of the time's shares differs from te_ccl/deadline.py's "
        "TimeShares; it should read:\n" + shares_table(SHARES))


def test_each_share_names_a_module_that_asks_for_it():
    root = Path(__file__).parents[2] / "te_ccl"
    for f in fields(SHARES):
        assert f"SHARES.{f.name}" in (root / f.metadata["stage"]).read_text(), f.name


def test_a_share_is_a_fraction():
    with pytest.raises(ValueError, match="TimeShares.search is a fraction"):
        replace(SHARES, search=1.5)
