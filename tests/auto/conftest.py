"""Fixtures of the portfolio's tests."""

from __future__ import annotations

import pytest

from te_ccl.spec.topology import load_topology
from te_ccl.topology.model import Topology

BOXES = """\
name: boxes2x2
generator:
  kind: boxes
  count: 2
  box: {kind: star, n: 2, bandwidth: 450GB/s, latency: 0.7us, switch: {nvls: true}}
  join: {kind: rails, nodes: [g0, g1], bandwidth: 400Gbps, latency: 1.3us}
"""


@pytest.fixture(scope="module")
def boxes(tmp_path_factory) -> Topology:
    """Two boxes of two GPUs on an NVLS switch, joined by rails: the box plan's fabric."""
    path = tmp_path_factory.mktemp("boxes") / "boxes2x2.yaml"
    path.write_text(BOXES)
    return load_topology(str(path))
