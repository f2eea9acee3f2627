"""Switch tables: columns, checks, encoded size, shared configurations, atomic writes,
schedule input."""

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
    TABLES,
    fred_tables_for,
    lower_to_fred_tables,
    render_fred_tables,
    write_fred_tables,
)
from te_ccl.schedule import Schedule, Transfer
from te_ccl.spec.topology import load_topology
from te_ccl.verify.fred_tables import check_fred_dir, check_fred_tables


@pytest.fixture(scope="module")
def dp_phase():
    return compile_phase(VARIANTS["fred-d"], parse_strategy("MP2-DP5-PP2"), "DP", 1e9)


def test_tables_have_the_spec_columns_and_pass_the_checks(dp_phase, tmp_path):
    summary = write_fred_tables(dp_phase.phases, VARIANTS["fred-d"], tmp_path / "t")
    assert summary["fits"] and summary["phases"] == 1
    for name, cols in TABLES.items():
        with open(tmp_path / "t" / f"{name}.csv") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
        assert tuple(reader.fieldnames) == cols and (rows or name == "streams")
    tables = json.loads((tmp_path / "t" / "tables.json").read_text())
    l2 = [r for r in tables["flows"] if r["switch"] == "L2"]
    assert len(l2) == 16 and all(r["reduce_op"] == "sum" for r in l2)
    assert all(len(r["input_ports"].split()) == 5 for r in l2)
    assert 0 < tables["config_bytes"]["L2"] <= SRAM_BYTES
    modes = {r["mode"] for r in tables["uswitches"]}
    assert {"reduce", "broadcast"} <= modes or "reduce-broadcast" in modes
    assert check_fred_dir(tmp_path / "t").clean


def _tampered(dp_phase, change):
    """The DP phase's tables with the L2 routing's µSwitch settings passed through
    ``change``."""
    phase = dp_phase.phases[0]
    routing = phase.routings["L2"]
    bad = dataclasses.replace(phase, routings={
        **phase.routings, "L2": routing.with_elements(change(list(routing.elements)))})
    return [bad]


def test_the_checker_catches_a_shared_colour_and_a_false_reduce(dp_phase):
    def share_colour(elements):
        shared = next(s for s in elements if len(s.uses) == 2)
        same = tuple(dataclasses.replace(u, colour=shared.uses[0].colour,
                                         output_sel=shared.uses[0].output_sel)
                     for u in shared.uses)
        return [dataclasses.replace(s, uses=same) if s is shared else s for s in elements]

    def false_reduce(elements):
        lone = next(s for s in elements if s.element.kind.value == "R" and len(s.uses) == 2)
        return [dataclasses.replace(s, mode="reduce") if s is lone else s for s in elements]

    for change, words in ((share_colour, "meet on one wire"), (false_reduce, "mode reduce")):
        phases = _tampered(dp_phase, change)
        texts = render_fred_tables(lower_to_fred_tables(phases, VARIANTS["fred-d"]))
        report = check_fred_tables(texts)
        assert any(words in v.message for v in report.violations), report.violations[:3]
        with pytest.raises(VerificationError):
            write_fred_tables(phases, VARIANTS["fred-d"], "/nonexistent/never")


def test_encoding_is_bounded_by_the_dense_size():
    sw = build_fred(20, 3, "L2")
    r = route(sw, [Flow("ar", tuple(range(20)), tuple(range(20)))])
    bits, value = encode(r)
    assert bits <= 8 * config_bytes(sw) and value.bit_length() <= bits
    empty_bits, _ = encode(route(sw, [Flow("u", (0,), (1,))]))
    assert empty_bits < bits  # sparse form for a nearly idle switch


def test_unicast_phases_use_the_default_configuration(tmp_path):
    r = compile_phase(VARIANTS["fred-a"], parse_strategy("MP2-DP5-PP2"), "DP", 1e9)
    summary = write_fred_tables(r.phases, VARIANTS["fred-a"], tmp_path)
    assert set(summary["config_bytes"].values()) == {0}
    with open(tmp_path / "phases.csv") as f:
        assert all(row["default_unicast"] == "True" for row in csv.DictReader(f))
    with open(tmp_path / "configs.csv") as f:
        assert {row["config"] for row in csv.DictReader(f)} == {"default"}


def test_output_path_that_is_a_file_is_refused(dp_phase, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SpecError):
        write_fred_tables(dp_phase.phases, VARIANTS["fred-d"], target)
    assert target.read_text() == "x"


def _pair_allreduce(topo, chunks=(0, 1)) -> Schedule:
    """npu0 and npu1 add each chunk in L1.0, which sends the sum back to both."""
    transfers = []
    for c in chunks:
        transfers += [Transfer(c, "npu0", "L1.0", 0, 1, "reduce"),
                      Transfer(c, "npu1", "L1.0", 0, 1, "reduce"),
                      Transfer(c, "L1.0", "npu0", 1, 2), Transfer(c, "L1.0", "npu1", 1, 2)]
    return Schedule(topo, Collective(CollectiveKind.ALLREDUCE, 2000, (0, 1)), 1e-6,
                    tuple(transfers))


def test_fred_tables_for_a_schedule_stripe_each_chunk_over_the_lanes(tmp_path):
    topo = load_topology("fred-d")
    written = fred_tables_for(_pair_allreduce(topo), topo, tmp_path)
    assert sorted(p.name for p in written.paths) == sorted(
        [f"{n}.csv" for n in TABLES] + ["tables.json"])
    tables = json.loads((tmp_path / "tables.json").read_text())
    flows = tables["flows"]
    # both chunks need both NPUs' four lanes: one after the other, 250 B per lane
    assert [(f["phase"], f["input_ports"], f["output_ports"], f["bytes"]) for f in flows] == \
        [(p, f"{k * 4} {k * 4 + 1}", f"{k * 4} {k * 4 + 1}", 250) for p in (0, 1)
         for k in range(4)]
    assert {f["operation"] for f in flows} == {"allreduce"}
    assert [s["stream"] for s in tables["streams"]] == ["s0", "s1"]
    assert written.fabric["phases"] == 2 and written.fabric["sram_fits"]
    # both chunks pass L1.0 in the epoch they arrive: it holds none across epochs
    assert written.fabric["switches"]["L1.0"]["buffer_bytes"] == 0
    assert written.fabric["buffer_fits"] and written.fabric["warning"] is None
    assert check_fred_dir(tmp_path).clean
    with pytest.raises(SpecError):
        fred_tables_for([], load_topology("wafer-mesh5x4"), tmp_path / "x")


def test_phases_with_the_same_settings_share_a_configuration(tmp_path):
    topo = load_topology("fred-d")
    fred_tables_for(_pair_allreduce(topo, chunks=range(10)), topo, tmp_path)
    tables = json.loads((tmp_path / "tables.json").read_text())
    l1 = [c for c in tables["configs"] if c["switch"] == "L1.0"]
    assert len(l1) == 10 and {c["config"] for c in l1} == {0}
    assert tables["config_bytes"]["L1.0"] == l1[0]["bytes"]


def test_a_switch_that_cannot_copy_forwards_each_arrival_once(tmp_path):
    """Two NPUs hand FRED-A's L1.0 one chunk in the same epoch and it sends the chunk on
    to two NPUs: two unicast streams (FRED-A's switches neither copy nor add), the one
    from npu1 after the stream that brought npu1 the chunk."""
    topo = load_topology("fred-a")
    t = [Transfer(0, "npu0", "L1.0", 0, 1), Transfer(0, "L1.0", "npu1", 1, 2),
         Transfer(0, "npu0", "L1.0", 2, 3), Transfer(0, "npu1", "L1.0", 2, 3),
         Transfer(0, "L1.0", "npu2", 3, 4), Transfer(0, "L1.0", "npu3", 3, 4)]
    coll = Collective(CollectiveKind.BROADCAST, 4000, (0, 1, 2, 3), root=0)
    written = fred_tables_for(Schedule(topo, coll, 1e-6, tuple(t)), topo, tmp_path)
    tables = json.loads((tmp_path / "tables.json").read_text())
    assert [(s["sources"], s["destinations"], s["after"]) for s in tables["streams"]] == [
        ("npu0", "npu1", ""), ("npu0", "npu2", ""), ("npu1", "npu3", "s0")]
    assert {f["operation"] for f in tables["flows"]} == {"unicast"}
    assert {c["config"] for c in tables["configs"]} == {"default"}
    assert written.fabric["sram_bytes_max"] == 0 and check_fred_dir(tmp_path).clean


def test_an_sram_overflow_is_reported_not_refused(tmp_path, monkeypatch):
    """Configurations larger than the SRAM are a finding about the fabric: the tables are
    written with ``fits: false``, the compile's report warns, and `fred check` fails."""
    topo = load_topology("fred-d")
    monkeypatch.setattr("te_ccl.lower.fred.SRAM_BYTES", 8)
    monkeypatch.setattr("te_ccl.fred.limits.SRAM_BYTES", 8)
    written = fred_tables_for(_pair_allreduce(topo), topo, tmp_path)
    assert not written.summary["fits"]
    fabric = written.fabric
    assert not fabric["sram_fits"] and not fabric["fits"] and fabric["sram_switch"] == "L1.0"
    assert fabric["warning"] == (f"fred-d: L1.0 needs {fabric['sram_bytes_max']}B of "
                                 "configuration SRAM (has 8B)")
    report = check_fred_dir(tmp_path)
    assert set(report.counts) == {"sram"}


def test_a_chunk_crossing_a_link_twice_takes_a_lane_for_each_crossing(tmp_path):
    """L2 sends the chunk down to L1.1 twice (it bounces back up in between): each of
    the stream's stripes takes two lanes of that link."""
    topo = load_topology("fred-d")
    hops = [("npu0", "L1.0"), ("L1.0", "L2"), ("L2", "L1.1"), ("L1.1", "L2"), ("L2", "L1.1"),
            ("L1.1", "npu4")]
    t = tuple(Transfer(0, a, b, e, e + 1) for e, (a, b) in enumerate(hops))
    coll = Collective(CollectiveKind.BROADCAST, 4000, (0, 4), root=0)
    fred_tables_for(Schedule(topo, coll, 1e-6, t), topo, tmp_path)
    tables = json.loads((tmp_path / "tables.json").read_text())
    down = [f for f in tables["flows"] if f["switch"] == "L2"]
    # npu0's 4 lanes give 4 stripes, each down from L2 to L1.1 on two lanes
    assert len(down) == 8 and len({f["output_ports"] for f in down}) == 8
    assert check_fred_dir(tmp_path).clean
