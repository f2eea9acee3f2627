"""The Ray executor on a real local Ray instance gives exactly the local executor's results."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from te_ccl.cli.main import cli
from te_ccl.sweep.run import TIMING_FIELDS

ray = pytest.importorskip(
    "ray", reason="ray is not installed: `pip install teccl[ray]` to test the Ray executor")

# The two 1-chunk points succeed, the two 2-chunk points fail at once (7 epochs > max_horizon):
# failures travel too. The time limit is generous: a loaded machine must not turn a success
# into a timeout on one executor only.
GRID = """\
topologies: [ring8]
collectives: [allgather]
sizes: [32KB, 1MB]
chunks: [1, 2]
max_horizon: 4
time_limit: 120s
"""


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray instance for the module (starting Ray takes seconds)."""
    # address="local": always a fresh instance, never a cluster left running on this machine
    # loopback only: the test cluster never listens on or talks to another address
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


def run(grid: str, out, *executor: str) -> dict:
    result = CliRunner().invoke(cli, ["sweep", grid, "-o", str(out), *executor, "--json"])
    assert result.exit_code == 1, result.output  # one point fails on purpose
    return json.loads(result.stdout)


def comparable(out) -> list[dict[str, str]]:
    with open(out / "index.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMING_FIELDS}
                for row in csv.DictReader(f)]


@pytest.mark.slow
def test_ray_sweep_equals_local_sweep(ray_session, grid_file, tmp_path):
    grid = str(grid_file(GRID))
    on_ray = run(grid, tmp_path / "ray", "--ray-address", "auto")
    local = run(grid, tmp_path / "local", "--workers", "2")
    assert on_ray["executor"].startswith("Ray cluster")
    statuses = {name: [(r["status"], r["reason"]) for r in run["results"]]
                for name, run in (("ray", on_ray), ("local", local))}
    assert (on_ray["ok"], on_ray["failed"]) == (local["ok"], local["failed"]) == (2, 2), statuses
    assert comparable(tmp_path / "ray") == comparable(tmp_path / "local")
    for r in local["results"]:
        if r["xml"]:
            assert (tmp_path / "ray" / r["xml"]).read_bytes() == \
                (tmp_path / "local" / r["xml"]).read_bytes()
    published = sorted(p.name for p in (tmp_path / "ray" / "msccl" / "ring8").glob("*.xml"))
    assert published == sorted(p.name for p in (tmp_path / "local" / "msccl" / "ring8").glob("*.xml"))
    assert len(published) == 2  # one per size range
