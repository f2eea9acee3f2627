"""The jobs benchmark's rows are valid jobs files, and apart means apart (no compile here)."""

import pytest

from devtools.jobs_bench import SCENARIOS, markdown
from te_ccl.jobs.spec import jobs_from
from te_ccl.spec.topology import load_topology


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: f"{s.topology}-{s.name}")
def test_each_row_loads_and_overlaps_as_named(scenario):
    jobs = jobs_from(load_topology(scenario.topology), {"jobs": [dict(j) for j in scenario.jobs]},
                     None)
    assert len(jobs.jobs) == int(scenario.name[0])
    assert bool(jobs.overlapping()) == scenario.name.endswith("shared")


def test_the_table_gives_the_bound_where_the_row_has_one():
    row = {"topology": "t", "scenario": "2 jobs, shared", "shared_links": 1, "method": "alone",
           "joint_s": 2e-3, "together_s": 2e-3, "ratio": 1.0, "goal": "<= 0.85", "met": False}
    text = markdown([row | {"bound_s": 1e-3}, row])
    assert "| 1.000 ms | 0.500 |" in text and "| - | - |" in text
