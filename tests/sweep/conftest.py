"""Tiny grids for the sweep tests: ring8 solves in about a second per point."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def grid_file(tmp_path: Path):
    """Write a GRID.yaml from text and return its path."""

    def write(text: str, name: str = "grid.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


# Two points: chunks 1 solves in 4 epochs; chunks 2 needs 7 > max_horizon, so it fails
# at once (the horizon lower bound), without a solve.
ONE_OK_ONE_FAILED = """\
topologies: [ring8]
collectives: [allgather]
sizes: [1MB]
chunks: [1, 2]
max_horizon: 4
time_limit: 20s
"""

# Two successful points in one group (same size range): the store must pick one.
TWO_OK = """\
name: small
topologies: [ring8]
collectives: [allgather]
sizes:
  - {max: 64KB, at: 32KB}
chunks: [1, 2]
time_limit: 20s
"""


@pytest.fixture
def one_ok_one_failed(grid_file) -> str:
    return str(grid_file(ONE_OK_ONE_FAILED, "one-ok-one-failed.yaml"))


@pytest.fixture
def two_ok(grid_file) -> str:
    return str(grid_file(TWO_OK, "two-ok.yaml"))
