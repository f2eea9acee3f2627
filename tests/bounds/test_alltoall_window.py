"""AlltoAll's ``window_s`` (a group's far pairs cross its links in windows of ``T − θ``):
no verified file replays below it, on the boxed machines where it sets the bound and on
random fabrics."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from te_ccl.bounds import alltoall_window, lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.spec.topology import load_topology
from tests.bounds.strategies import fabrics
from tests.bounds.test_alltoall_alpha import SMALL, every_gpu, template_replays


def _files(topo, c: Collective) -> list[float]:
    return template_replays(topo, c, ("direct", "far-first"))


@pytest.mark.parametrize("topology", ["hgx-h100x2", "ndv2x2"])
@pytest.mark.parametrize("size", [1024, 64_000])
def test_no_template_file_on_a_boxed_machine_replays_below_it(topology: str, size: int) -> None:
    topo = load_topology(topology)
    c = Collective(CollectiveKind.ALLTOALL, size, tuple(range(topo.ngpus)))
    bound = alltoall_window(topo, topo.gpus, size / topo.ngpus)[0]
    assert bound > 0
    for seconds in _files(topo, c):
        assert seconds >= bound * (1 - 1e-9)


def test_it_sets_hgx_bound_at_small_sizes_only() -> None:
    hgx = load_topology("hgx-h100x2")
    small = lower_bound(hgx, Collective(CollectiveKind.ALLTOALL, 64_000, tuple(range(16))))
    large = lower_bound(hgx, Collective(CollectiveKind.ALLTOALL, 2**30, tuple(range(16))))
    assert small.argument == "window_s" and small.seconds == pytest.approx(4.28e-6)
    assert large.argument != "window_s"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(), SMALL)
def test_no_template_file_replays_below_it_on_random_fabrics(topo, chunk):
    c = every_gpu(topo, chunk)
    bound = alltoall_window(topo, [topo.gpu(r) for r in c.ranks], float(chunk))[0]
    for seconds in _files(topo, c):
        assert seconds >= bound * (1 - 1e-9)
