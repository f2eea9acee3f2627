"""The templates import OR-Tools' solvers (CP-SAT with pandas, GLOP) where they build
with them: a compile that builds neither (``--from``, a scale first file) does not pay
their import."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_api_and_the_templates_loads_no_ortools_solver():
    code = ("import json, sys\nimport te_ccl.api, te_ccl.baselines\n"
            "print(json.dumps(sorted(m for m in sys.modules "
            "if m.startswith(('ortools.sat', 'ortools.linear_solver', 'pandas')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out.splitlines()[-1]) == []
