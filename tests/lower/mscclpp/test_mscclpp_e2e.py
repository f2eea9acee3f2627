"""End to end: ``teccl compile --format mscclpp`` on small machines writes plans that
``teccl verify`` accepts and ``teccl simulate`` replays; on an NVLS machine the plan
reduces in the switch."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def fred8(tmp_path_factory):
    """A FRED-B wafer of 8 NPUs (its switches reduce, which a plan cannot drive)."""
    from te_ccl.cli.main import main

    path = tmp_path_factory.mktemp("fred") / "fred-b-8.yaml"
    with pytest.raises(SystemExit) as exc:
        main(["topo", "gen", "fred-b", "--npus", "8", "-o", str(path)])
    assert exc.value.code == 0
    return str(path)


CASES = [("ring8", "allgather"), ("ring8", "alltoall"), ("dgx1", "allreduce"),
         ("dgx1", "reducescatter"), ("fred8", "allreduce"), ("dgx-h100", "allreduce"),
         ("dgx-h100", "allgather")]


@pytest.mark.parametrize("topo,kind", CASES)
def test_compile_verify_simulate(teccl, tmp_path, fred8, topo, kind):
    topology = fred8 if topo == "fred8" else topo
    out = tmp_path / "plan.json"
    rc, _, err = teccl("compile", topology, "-c", kind, "--size", "64KB", "--format",
                       "mscclpp", "-o", str(out), "--backend", "rounds", "--time-limit", "120",
                       "--json")
    assert rc == 0, err
    rc, text, _ = teccl("verify", "--json", str(out))
    report = json.loads(text)
    assert rc == 0 and report["valid"] and report["collective"] == kind
    rc, text, err = teccl("simulate", topology, str(out), "--size", "64KB", "--json")
    assert rc == 0, err
    assert json.loads(text)["finish_time_s"] > 0
    plan = json.loads(out.read_text())
    names = {op["name"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]}
    if (topo, kind) == ("dgx-h100", "allreduce"):
        assert "glres" in names  # NVLink SHARP adds in the switch
    if topo in ("fred8", "ring8", "dgx1"):
        assert "glres" not in names  # no NVLS there: FRED's switches only forward


def test_plans_cover_four_collectives(teccl, tmp_path):
    rc, _, err = teccl("compile", "ring8", "-c", "broadcast", "--size", "64KB", "--format",
                       "mscclpp", "-o", str(tmp_path / "b.json"))
    assert rc == 2 and "MSCCL++ execution plans cover" in err
