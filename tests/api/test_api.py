"""The Python API (``te_ccl.compile``) and the packaging facts it relies on."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import te_ccl
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.errors import SpecError
from te_ccl.verify.msccl import verify_msccl

ROOT = Path(__file__).resolve().parents[2]


def test_compile_writes_a_verified_file_and_returns_the_result(tmp_path):
    out = tmp_path / "ag.xml"
    result = te_ccl.compile("ring8", "allgather", size=1_000_000, output=out)
    assert isinstance(result, te_ccl.CompileResult)
    assert result.output == str(out) and verify_msccl(out).valid
    assert result.schedule.collective.size_bytes == 1_000_000


def test_compile_takes_objects_and_rooted_defaults():
    coll = Collective(CollectiveKind.BROADCAST, 1_000_000, tuple(range(8)), root=3)
    assert te_ccl.compile("ring8", coll).schedule.collective.root == 3
    assert te_ccl.compile("ring8", "reduce", size="1MB").schedule.collective.root == 0


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"size": "1MB", "chunks": "many"}, "chunks"),
    ({"size": "1MB", "epoch": "soon"}, "epoch"),
    ({"size": "lots"}, "--size"),
])
def test_bad_arguments_raise_spec_errors(kwargs, key):
    with pytest.raises(SpecError) as exc:
        te_ccl.compile("ring8", "allgather", **kwargs)
    assert exc.value.key == key


def _spy_on_compile(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The keyword arguments of every call of ``te_ccl.compile`` from now on."""
    calls: list[dict] = []
    real = te_ccl.api.compile

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(te_ccl.api, "compile", spy)
    return calls


def test_the_cli_compiles_through_the_api(teccl, monkeypatch, tmp_path):
    calls = _spy_on_compile(monkeypatch)
    code, _, _ = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB", "--chunks", "auto",
                       "-o", str(tmp_path / "a.xml"), "--json")
    assert code == 0 and len(calls) == 1 and calls[0]["chunks"] == "auto"


def test_a_size_library_is_one_api_call_and_the_cli_makes_it(teccl, monkeypatch, tmp_path):
    results = te_ccl.compile("ring8", "allgather", sizes="1KiB..4KiB", output=tmp_path / "a")
    assert [(r.min_bytes, r.max_bytes) for r in results] == [(1024, 4095), (4096, 4096)]
    assert all(verify_msccl(r.output).valid for r in results)
    calls = _spy_on_compile(monkeypatch)
    code, out, _ = teccl("compile", "ring8", "-c", "allgather", "--sizes", "1KiB..4KiB",
                         "-o", str(tmp_path / "b"), "--json")
    assert code == 0 and [c["sizes"] for c in calls] == [(1024, 4096)]
    assert [a["output"] for a in json.loads(out)["algorithms"]] == \
        sorted(str(p) for p in (tmp_path / "b").iterdir())


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"fred_tables": "t"}, "fred_tables"),
    ({"previous": "p.xml"}, "previous"),
    ({"fmt": "mscclpp"}, "fmt"),
    ({"output": None}, "output"),
    ({"sizes": (1, 2, 3)}, "sizes"),
    ({"sizes": (0, 5)}, "sizes"),
    ({"sizes": (5, 1)}, "sizes"),
    ({"sizes": "1KB"}, "--sizes"),
])
def test_a_size_library_refuses_what_is_one_algorithms(tmp_path, kwargs, key):
    args = {"sizes": "1KB..4KB", "output": tmp_path / "lib", **kwargs}
    with pytest.raises(SpecError) as exc:
        te_ccl.compile("ring8", "allgather", **args)
    assert exc.value.key == key and list(tmp_path.iterdir()) == []


def test_a_previous_file_with_a_max_horizon_is_refused_by_the_api_and_the_cli(teccl, tmp_path):
    """``auto`` with a ``max_horizon`` runs the flow model alone, which no file seeds."""
    prev = tmp_path / "p.xml"
    prev.write_text("<algo/>")
    with pytest.raises(SpecError) as exc:
        te_ccl.compile("ring8", "allgather", size="1KB", output=tmp_path / "a.xml",
                       previous=prev, max_horizon=8)
    assert exc.value.key == "previous" and "max_horizon" in str(exc.value)
    code, _, err = teccl("compile", "ring8", "-c", "allgather", "-s", "1KB", "-o",
                         str(tmp_path / "b.xml"), "--from", str(prev), "--max-horizon", "8")
    assert code == 2 and "--from" in err and "--max-horizon" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.xml"]


def test_a_size_beside_a_size_library_is_refused_by_the_api_and_the_cli(teccl, tmp_path):
    """Each range is compiled at its own size: a size beside them names none of them."""
    with pytest.raises(SpecError) as exc:
        te_ccl.compile("ring8", "allgather", sizes="1KB..1MB", size="64MB",
                       output=tmp_path / "lib")
    assert exc.value.key == "size"
    code, out, err = teccl("compile", "ring8", "-c", "allgather", "--sizes", "1KB..1MB",
                           "--size", "64MB", "-o", str(tmp_path / "lib"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "--size: " in err
    assert list(tmp_path.iterdir()) == []


def test_a_spec_files_size_is_overridden_by_a_size_library(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("collective: allgather\nsize: 64MB\n")
    results = te_ccl.compile("ring8", spec=spec, sizes="1KiB..2KiB", output=tmp_path / "lib",
                             time_limit_s=10)
    assert [(r.min_bytes, r.max_bytes) for r in results] == [(1024, 2048)]
    assert all(r.schedule.collective.size_bytes <= 2048 for r in results)


def test_the_cli_refuses_fred_tables_with_a_size_library(teccl, tmp_path):
    # they were checked, then not written (exit 0)
    code, _, err = teccl("compile", "ring8", "-c", "allgather", "--sizes", "1KB..4KB", "-o",
                         str(tmp_path / "lib"), "--fred-tables", str(tmp_path / "t"))
    assert code == 2 and "--fred-tables" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_import_is_light_and_typed():
    probe = "import sys, te_ccl; print('ortools' in sys.modules, te_ccl.__version__)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()
    assert out == ["False", te_ccl.__version__]
    assert (ROOT / "te_ccl" / "py.typed").exists()


def test_packaging_has_one_version_a_license_and_extras():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert "version" in project["dynamic"] and "version" not in project
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "te_ccl.__version__"}
    assert "MIT" in (ROOT / "LICENSE").read_text()
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["te_ccl"]
    runtime = " ".join(project["dependencies"])
    assert "matplotlib" not in runtime and "ray" not in runtime
    assert "lxml" in runtime  # the NCCL XML importer parses with it on every import
    extras = project["optional-dependencies"]
    assert not any("lxml" in d for d in extras["dev"])
    assert any("matplotlib" in d for d in extras["plot"])
    assert any("ray" in d for d in extras["ray"])
    assert project["urls"] and project["classifiers"]
    assert "[dev,ray,plot]" in (ROOT / "Makefile").read_text()


def test_plotting_without_matplotlib_names_the_extra(monkeypatch):
    from te_ccl.outputs import pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SpecError, match=r"teccl\[plot\]"):
        pyplot()


def test_the_result_has_every_metric_of_compile_json_under_its_name(teccl, tmp_path):
    result = te_ccl.compile("ring8", "allgather", size="1MB", time_limit_s=20)
    code, stdout, _ = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB",
                            "-o", str(tmp_path / "a.xml"), "--json", "--time-limit", "20")
    printed, metrics = json.loads(stdout), result.as_dict()
    assert code == 0 and set(metrics) == set(printed)
    for key in ("bound_ratio", "algbw_GBps", "busbw_GBps", "max_buffer_bytes",
                "peak_scratch_bytes", "buffer_bytes", "measured_by", "finish_time_s"):
        assert getattr(result, key) == metrics[key]
    assert result.bound_ratio == pytest.approx(result.finish_time_s / result.lower_bound_s)
    with pytest.raises(AttributeError, match="no attribute 'bandwidth'"):
        result.bandwidth  # noqa: B018 - the lookup is the test


def test_the_format_is_decided_once_for_the_cli_and_the_api():
    """The name decides where no format is asked: a plan, a schedule JSON, MSCCL XML; on a
    fabric whose switches reduce, the schedule JSON unless the name says .xml."""
    from te_ccl.compiler import output_format

    assert output_format("a.mscclpp.json", None, []) == "mscclpp"
    assert output_format("a.json", None, []) == "json"
    assert output_format("a.xml", None, ["l2"]) == "xml"
    assert output_format(None, None, ["l2"]) == "json"
    assert output_format(None, None, []) == "xml"
    assert output_format("a.json", "xml", []) == "xml"


@pytest.mark.parametrize("fmt", ["json", "mscclpp"])
def test_a_runtime_other_than_msccls_is_refused_for_what_is_not_xml(teccl, tmp_path, fmt):
    """The API refuses it as the CLI does (the CLI asks the API)."""
    with pytest.raises(SpecError) as exc:
        te_ccl.compile("ring8", "allgather", size="1MB", output=tmp_path / "x", fmt=fmt,
                       runtime="rccl")
    assert exc.value.key == "runtime"
    code, _, err = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB", "--format", fmt,
                         "--runtime", "rccl", "-o", str(tmp_path / "x"))
    assert code == 2 and "the rccl runtime loads MSCCL XML" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_plan_is_compiled_on_the_same_machine_by_the_api_and_the_sweep(tmp_path):
    """The compile itself lets a switch a plan cannot drive only forward (a reducing
    switch that is not NVLink SHARP): the sweep, which calls it directly, gets what the
    API gets, with no note about MSCCL XML."""
    from te_ccl.compiler import CompileOptions, SolveParams, compile_collective
    from te_ccl.topology.generators import SwitchCaps, star

    topo = star(4, 100e9, switch=SwitchCaps(reduce=True))
    coll = Collective(CollectiveKind.ALLGATHER, 64 << 10, (0, 1, 2, 3))
    direct = compile_collective(topo, coll, SolveParams(time_limit_s=20),
                                CompileOptions(output=str(tmp_path / "a.json"), fmt="mscclpp"))
    api = te_ccl.compile(topo, coll, output=tmp_path / "b.json", fmt="mscclpp",
                         time_limit_s=20)
    assert direct.schedule.topology.reducing_switches == ()
    assert direct.schedule.info.notes == api.schedule.info.notes
    assert not any(n.startswith("msccl:") for n in direct.schedule.info.notes)
