"""`python -m devtools.jobs_bench` refuses a row selection that names no row (exit 2)
rather than run nothing and report every target met."""

import pytest
from click.testing import CliRunner

from devtools.jobs_bench import jobs_bench_cmd


@pytest.mark.parametrize("args", [("--scenario", "2 jobs, sharing"), ("--only", "dgx3")])
def test_a_selection_of_no_row_is_refused(args):
    result = CliRunner().invoke(jobs_bench_cmd, list(args))
    assert result.exit_code == 2 and f"Invalid value for '{args[0]}'" in result.output
