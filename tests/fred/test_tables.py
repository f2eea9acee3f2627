"""Switch tables: columns, checks, encoded size, atomic writes, schedule input."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.errors import SpecError, VerificationError
from te_ccl.fred.encoding import SRAM_BYTES, config_bytes, encode
from te_ccl.fred.routing import Flow, route
from te_ccl.fred.strategy import compile_phase, parse_strategy
from te_ccl.fred.switch import build_fred
from te_ccl.fred.wafer import VARIANTS
from te_ccl.lower.fred import (
    FLOW_COLUMNS,
    PHASE_COLUMNS,
    USWITCH_COLUMNS,
    check_phases,
    fred_tables_for,
    write_fred_tables,
)
from te_ccl.schedule import Schedule, Transfer
from te_ccl.spec.topology import load_topology


@pytest.fixture(scope="module")
def dp_phase():
    return compile_phase(VARIANTS["fred-d"], parse_strategy("MP2-DP5-PP2"), "DP", 1e9)


def test_tables_have_the_spec_columns_and_pass_the_checks(dp_phase, tmp_path):
    summary = write_fred_tables(dp_phase.phases, VARIANTS["fred-d"], tmp_path / "t")
    assert summary["fits"] and summary["phases"] == 1
    for name, cols in (("flows", FLOW_COLUMNS), ("uswitches", USWITCH_COLUMNS),
                       ("phases", PHASE_COLUMNS)):
        with open(tmp_path / "t" / f"{name}.csv") as f:
            rows = list(csv.DictReader(f))
        assert tuple(rows[0]) == cols and rows
    tables = json.loads((tmp_path / "t" / "tables.json").read_text())
    l2 = [r for r in tables["flows"] if r["switch"] == "L2"]
    assert len(l2) == 16 and all(r["reduce_op"] == "sum" for r in l2)
    assert all(len(r["input_ports"].split()) == 5 for r in l2)
    assert 0 < tables["config_bytes"]["L2"] <= SRAM_BYTES
    modes = {r["mode"] for r in tables["uswitches"]}
    assert {"reduce", "broadcast"} <= modes or "reduce-broadcast" in modes


def test_checks_catch_a_shared_colour_and_a_false_reduce(dp_phase):
    phase = dp_phase.phases[0]
    routing = phase.routings["L2"]
    shared = next(s for s in routing.elements if len(s.uses) == 2)
    same = tuple(dataclasses.replace(u, colour=shared.uses[0].colour) for u in shared.uses)
    bad = [dataclasses.replace(s, uses=same) if s is shared else s for s in routing.elements]
    bad += [dataclasses.replace(shared, mode="reduce")]
    tampered = dataclasses.replace(phase, routings={
        **phase.routings, "L2": routing.with_elements(bad)})
    problems = check_phases([tampered])
    assert any("one colour" in p for p in problems)
    assert any("inputs are not one flow" in p for p in problems)
    with pytest.raises(VerificationError):
        write_fred_tables([tampered], VARIANTS["fred-d"], "/nonexistent/never")


def test_encoding_is_bounded_by_the_dense_size():
    sw = build_fred(20, 3, "L2")
    r = route(sw, [Flow("ar", tuple(range(20)), tuple(range(20)))])
    bits, value = encode(r)
    assert bits <= 8 * config_bytes(sw) and value.bit_length() <= bits
    empty_bits, _ = encode(route(sw, [Flow("u", (0,), (1,))]))
    assert empty_bits < bits  # sparse form for a nearly idle switch


def test_unicast_phases_use_the_default_index(tmp_path):
    r = compile_phase(VARIANTS["fred-a"], parse_strategy("MP2-DP5-PP2"), "DP", 1e9)
    summary = write_fred_tables(r.phases, VARIANTS["fred-a"], tmp_path)
    assert summary["config_bytes"] == {}
    with open(tmp_path / "phases.csv") as f:
        assert all(row["default_unicast"] == "True" for row in csv.DictReader(f))


def test_output_path_that_is_a_file_is_refused(dp_phase, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SpecError):
        write_fred_tables(dp_phase.phases, VARIANTS["fred-d"], target)


def test_fred_tables_for_a_schedule(tmp_path):
    topo = load_topology("fred-d")
    coll = Collective(CollectiveKind.ALLREDUCE, 2000, (0, 1))
    transfers = []
    for c in (0, 1):
        transfers += [Transfer(c, "npu0", "L1.0", 0, 1, "reduce"),
                      Transfer(c, "npu1", "L1.0", 0, 1, "reduce"),
                      Transfer(c, "L1.0", "npu0", 1, 2), Transfer(c, "L1.0", "npu1", 1, 2)]
    paths = fred_tables_for(Schedule(topo, coll, 1e-6, tuple(transfers)), topo, tmp_path)
    assert sorted(p.name for p in paths) == ["flows.csv", "phases.csv", "tables.json",
                                             "uswitches.csv"]
    flows = json.loads((tmp_path / "tables.json").read_text())["flows"]
    assert [(f["input_ports"], f["operation"]) for f in flows] == \
        [("0 1", "allreduce"), ("4 5", "allreduce")]
    with pytest.raises(SpecError):
        fred_tables_for([], load_topology("wafer-mesh5x4"), tmp_path / "x")
