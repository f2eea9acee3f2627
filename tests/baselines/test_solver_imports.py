"""The templates import OR-Tools' solvers (CP-SAT with pandas, GLOP) where they build
with them: a compile that builds neither (``--from``, a scale first file) does not pay
their import."""

from __future__ import annotations


def test_importing_the_api_and_the_templates_loads_no_ortools_solver(fresh):
    _, loaded = fresh("import te_ccl.api, te_ccl.baselines")
    assert [m for m in loaded if m.startswith(("ortools.sat", "ortools.linear_solver",
                                               "pandas"))] == []
