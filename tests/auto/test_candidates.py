"""The registry of the compile's candidates (te_ccl.compiler.candidates): every backend
and template is in it, and a candidate only one format can write is offered there alone."""

from __future__ import annotations

import importlib

from te_ccl.backends.base import BACKENDS, FLOW_SOLVERS
from te_ccl.baselines import BASELINES
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams
from te_ccl.compiler.candidates import CANDIDATES, backend, first_file, known, offered
from te_ccl.topology.generators import mesh


def test_every_backend_and_template_is_registered_once():
    names = [c.name for c in CANDIDATES]
    assert len(names) == len(set(names))
    assert {c.name for c in CANDIDATES if c.kind == "template"} == {*BASELINES, "in-switch"}
    for name in BACKENDS:
        assert backend(name).kind == ("scale" if name == "scale" else "flow")


def test_compile_help_lists_every_backend_without_loading_a_solver(fresh):
    """``--backend``'s choices are the registry's names, read without importing it."""
    out, loaded = fresh("from te_ccl.cli.main import main\n"
                        "try:\n    main(['compile', '--help'])\nexcept SystemExit:\n    pass")
    assert f"[{'|'.join(BACKENDS)}]" in out
    assert not [m for m in loaded if m.startswith(("ortools", "te_ccl.compiler"))]
    for entry in FLOW_SOLVERS.values():  # each flow solver named is there to import
        module, function = entry.split(":")
        assert callable(getattr(importlib.import_module(module), function))


def test_backend_runs_the_backend_named():
    topo = mesh([2, 2], 1e9)
    coll = Collective(CollectiveKind.ALLGATHER, 1 << 16, tuple(range(4)))
    for name in ("milp", "scale"):
        s = backend(name).build(topo, coll, SolveParams(backend="auto", time_limit_s=600))
        assert s.info.backend == name


def test_the_box_plan_is_offered_under_mscclpp_alone(boxes):
    coll = Collective(CollectiveKind.ALLREDUCE, 1 << 20, tuple(range(boxes.ngpus)))
    assert [c.name for c in offered(boxes, coll, "mscclpp")][0] == "box plan"
    assert "box plan" not in [c.name for c in offered(boxes, coll, "xml")]
    params = SolveParams()
    assert [name for name, _ in known(boxes, coll, "mscclpp", params)] == ["template box plan"]
    assert known(boxes, coll, "xml", params) == ()


def test_a_first_file_tries_only_candidates_marked_first(boxes):
    coll = Collective(CollectiveKind.ALLREDUCE, 1 << 20, tuple(range(boxes.ngpus)))
    first = {c.trial(boxes, coll) for c in offered(boxes, coll, "mscclpp") if c.first}
    assert {name for name, _ in first_file(boxes, coll, SolveParams(), "mscclpp")} == first
    assert next(first_file(boxes, coll, SolveParams(), "mscclpp"))[0] == "template box plan"
    assert "template box plan" not in {name for name, _ in first_file(boxes, coll,
                                                                       SolveParams())}
