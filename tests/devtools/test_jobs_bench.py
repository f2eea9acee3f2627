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
