"""`python -m devtools.jobs_bench` refuses a row selection that names no row (exit 2)
rather than run nothing and report every target met."""

import pytest
from click.testing import CliRunner

from devtools.jobs_bench import jobs_bench_cmd


@pytest.mark.parametrize("args", [("--scenario", "2 jobs, sharing"), ("--only", "dgx3")])
def test_a_selection_of_no_row_is_refused(args):
    result = CliRunner().invoke(jobs_bench_cmd, list(args))
    assert result.exit_code == 2 and f"Invalid value for '{args[0]}'" in result.output


def test_the_jobs_files_alone_are_compiled_once_per_code(tmp_path, monkeypatch):
    import te_ccl
    from devtools.jobs_bench import _alone_files
    from te_ccl.jobs.spec import jobs_from
    from te_ccl.spec.topology import load_topology

    jobs = jobs_from(load_topology("dgx1"), {"jobs": [
        {"name": "a", "ranks": ["g0", "g1"], "collective": "allgather", "size": "1MB"},
        {"name": "b", "ranks": ["g0", "g1"], "collective": "allgather", "size": "1MB"}]}, None)
    first = _alone_files(jobs, "dgx1", tmp_path)
    assert len(list(tmp_path.rglob("*.xml"))) == 1  # one collective: one file

    def compile_again(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(te_ccl, "compile", compile_again)
    assert _alone_files(jobs, "dgx1", tmp_path) == first


def test_outside_a_git_checkout_the_files_alone_are_not_kept(tmp_path, monkeypatch):
    """Without a commit no key tells one code from another, so nothing is cached."""
    from devtools import provenance
    from devtools.jobs_bench import _alone_files
    from te_ccl.jobs.spec import jobs_from
    from te_ccl.spec.topology import load_topology

    monkeypatch.setattr(provenance, "commit", lambda: "")
    jobs = jobs_from(load_topology("dgx1"), {"jobs": [
        {"name": "a", "ranks": ["g0", "g1"], "collective": "allgather", "size": "1MB"}]}, None)
    assert set(_alone_files(jobs, "dgx1", tmp_path)) == {"a"}
    assert not any(tmp_path.iterdir())


def test_a_compile_that_exits_3_is_the_rows_answer(tmp_path, monkeypatch):
    """A job with no file in its limit (exit 3) is recorded as such, not the run's end."""
    import te_ccl
    from devtools.jobs_bench import Scenario, markdown, run_scenario
    from te_ccl.deadline import TimeLimitReached

    def out_of_time(*args, **kwargs):
        raise TimeLimitReached("time limit of 1 s reached while solving")

    monkeypatch.setattr(te_ccl, "compile", out_of_time)
    job = {"ranks": ["g0", "g1"], "collective": "allgather", "size": "1MB"}
    row = run_scenario(Scenario("dgx1", "2 jobs, shared", ({"name": "a"} | job,
                                                           {"name": "b"} | job)), 4.0, tmp_path)
    assert row["met"] is False and row["ratio"] is None
    assert set(row["exit_3"]) == {"joint", "alone"}
    assert "reached while solving" in row["exit_3"]["alone"]
    assert "| dgx1 | 2 jobs, shared | - | exit 3 (joint: " in markdown([row])
