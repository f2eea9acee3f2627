"""The jobs benchmark's rows are valid jobs files, and apart means apart (no compile here)."""

import pytest

from devtools.jobs_bench import SCENARIOS
from te_ccl.jobs.spec import jobs_from
from te_ccl.spec.topology import load_topology


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: f"{s.topology}-{s.name}")
def test_each_row_loads_and_overlaps_as_named(scenario):
    jobs = jobs_from(load_topology(scenario.topology), {"jobs": [dict(j) for j in scenario.jobs]},
                     None)
    assert len(jobs.jobs) == int(scenario.name[0])
    assert bool(jobs.overlapping()) == scenario.name.endswith("shared")
