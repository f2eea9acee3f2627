"""The library refuses MSCCL XML on a fabric whose switches reduce, as the CLI does:
the compile solves on the switches forwarding only, so the check asks the fabric given.
A joint compile of jobs, which writes MSCCL XML per job, has their switches forward."""

from __future__ import annotations

import pytest

import te_ccl
from te_ccl.errors import SpecError
from te_ccl.topology.generators import fred


@pytest.mark.parametrize("sizes", [None, "1KB..64KB"])
def test_xml_on_a_reducing_fabric_is_refused_before_anything_is_written(tmp_path, sizes):
    out = tmp_path / ("lib" if sizes else "a.xml")
    with pytest.raises(SpecError, match="MSCCL XML cannot express in-switch reduction"):
        te_ccl.compile(fred("fred-b", 8), "allgather", size=None if sizes else "1MB",
                       output=out, fmt="xml", sizes=sizes, time_limit_s=20)
    assert not out.exists()


def test_jobs_on_a_reducing_fabric_are_written_with_their_switches_forwarding(teccl,
                                                                            tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n"
                    "  - {name: a, ranks: [npu0, npu1, npu2, npu3], collective: allgather, "
                    "size: 1MB}\n"
                    "  - {name: b, ranks: [npu4, npu5, npu6, npu7], collective: allgather, "
                    "size: 1MB}\n")
    out = tmp_path / "out"
    code, _, err = teccl("compile", "fred-b", "--jobs", str(jobs), "-o", str(out),
                         "--time-limit", "60")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["a.xml", "b.xml"]
