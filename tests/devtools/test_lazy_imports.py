"""devtools.lazy_imports: which cross-package imports it counts, and which as lazy."""

from __future__ import annotations

from devtools.lazy_imports import cross_package_imports


def test_only_imports_of_another_package_count_and_those_in_functions_are_lazy(tmp_path):
    package = tmp_path / "te_ccl" / "a"
    package.mkdir(parents=True)
    (package / "x.py").write_text(
        "from te_ccl.b import y\n"
        "from te_ccl.a.z import w\n"
        "import te_ccl.c.d as d\n"
        "def f():\n"
        "    from te_ccl.e import g\n"
        "    from te_ccl.a import h\n")
    found = {(module, lazy) for _, _, module, lazy in cross_package_imports(tmp_path / "te_ccl")}
    assert found == {("te_ccl.b", False), ("te_ccl.c.d", False), ("te_ccl.e", True)}
