"""`teccl fred check`: the independent replay of switch tables finds every broken row."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.errors import SpecError
from te_ccl.fred.from_schedule import schedule_timeline
from te_ccl.fred.in_switch import in_switch_schedule
from te_ccl.fred.wafer import wafer_from_topology
from te_ccl.lower.fred import lower_to_fred_tables, render_fred_tables
from te_ccl.spec.topology import load_topology
from te_ccl.verify.fred_tables import check_fred_tables


def _tables(topo_name: str, kind: str, size: int = 20_000_000, ranks=None, chunks: int = 1,
            root: int | None = None) -> dict:
    topo = load_topology(topo_name)
    ranks = tuple(range(topo.ngpus)) if ranks is None else ranks
    schedule = in_switch_schedule(topo, Collective(CollectiveKind(kind), size, ranks, chunks,
                                                   root))
    wafer = wafer_from_topology(topo)
    timeline = schedule_timeline(schedule, wafer)
    return lower_to_fred_tables(timeline.phases, wafer, timeline.streams)


def _rules(tables: dict) -> set[str]:
    return set(check_fred_tables(render_fred_tables(tables)).counts)


@pytest.fixture(scope="module")
def allreduce() -> dict:
    return _tables("fred-d", "allreduce")


def test_the_tables_of_an_in_switch_allreduce_are_clean(allreduce):
    report = check_fred_tables(render_fred_tables(allreduce))
    assert report.clean and report.streams == 20 and report.phases == 20
    # every NPU sends and receives 20 MB once at 3 TB/s, plus 5.5 ns per phase change
    assert report.time_s == pytest.approx(20e6 / 3e12 + 20 * 4096 / 750e9)


def _row(tables: dict, table: str, **match) -> dict:
    return next(r for r in tables[table] if all(r[k] == v for k, v in match.items()))


def _mutated(tables: dict, change) -> dict:
    out = copy.deepcopy(tables)
    change(out)
    return out


def _flow_bytes(t: dict, delta: int) -> None:
    _row(t, "flows", switch="L1.0", operation="multicast")["bytes"] += delta


def _lane_rate(t: dict) -> None:
    _row(t, "ports", switch="L1.0", port=0)["lane_Bps"] = 1e9


def _output_port(t: dict) -> None:
    row = _row(t, "flows", switch="L1.0", operation="multicast", phase=0)
    row["output_ports"] = row["output_ports"].replace("0 ", "8 ", 1)


def _input_port(t: dict) -> None:
    row = _row(t, "flows", switch="L2", phase=0)
    row["input_ports"] = row["input_ports"].replace("16", "17", 1)


def _phase_order(t: dict) -> None:
    first, second = t["phases"][0], t["phases"][1]
    first["start_s"], second["start_s"] = second["start_s"], first["start_s"]
    first["end_s"], second["end_s"] = second["end_s"], first["end_s"]


def _overlap(t: dict) -> None:
    t["phases"][1]["start_s"] = t["phases"][0]["start_s"]


def _moved_flow(t: dict) -> None:
    _row(t, "flows", switch="L2", phase=0)["phase"] = 1


def _usurped_element(t: dict) -> None:
    row = next(r for r in t["uswitches"] if r["switch"] == "L2" and r["stage"] == "output"
               and r["phase"] == 0)
    row["output_sel"] = "1" if row["output_sel"] == "0" else "0"


def _config_size(t: dict) -> None:
    t["configs"][0]["bytes"] += 1


def _sram(t: dict) -> None:
    t["sram_bytes"] = 100
    t["fits"] = {k: v <= 100 for k, v in t["config_bytes"].items()}


def _stream_order(t: dict) -> None:
    t["streams"][0]["after"] = "s1"


def _operation(t: dict) -> None:
    _row(t, "flows", switch="L2")["operation"] = "unicast"


def _recursion_level(t: dict) -> None:
    t["uswitches"][0]["recursion_level"] += 1


@pytest.mark.parametrize("change,rules", [
    (lambda t: _flow_bytes(t, 10**9), {"rate"}),  # a byte count over the lane
    (lambda t: _flow_bytes(t, -1000), {"stream"}),  # a byte count short of the stream
    (_lane_rate, {"rate"}),  # a rate
    (_output_port, {"route"}),  # a port
    (_input_port, {"route", "link"}),
    (_phase_order, {"phase"}),  # a phase order
    (_overlap, {"phase"}),
    (_moved_flow, {"link"}),
    (_usurped_element, {"route"}),
    (_config_size, {"sram"}),
    (_sram, {"sram"}),
    (_stream_order, {"order"}),
    (_operation, {"flow"}),
    (_recursion_level, {"route"}),
])
def test_a_broken_row_is_caught(allreduce, change, rules):
    found = _rules(_mutated(allreduce, change))
    assert rules <= found, found


def test_a_csv_row_edited_without_tables_json_is_caught(allreduce):
    texts = render_fred_tables(allreduce)
    lines = texts["flows.csv"].splitlines(keepends=True)
    cells = lines[1].split(",")
    column = lines[0].split(",").index("bytes")
    cells[column] = str(int(cells[column]) - 1)
    lines[1] = ",".join(cells)
    report = check_fred_tables({**texts, "flows.csv": "".join(lines)})
    assert "json" in report.counts


@settings(max_examples=12, deadline=None)
@given(topo=st.sampled_from(["fred-b", "fred-d"]),
       kind=st.sampled_from(["allreduce", "reducescatter", "allgather", "broadcast", "reduce"]),
       ranks=st.sets(st.integers(0, 19), min_size=2, max_size=9),
       chunks=st.integers(1, 3))
def test_every_in_switch_schedule_has_clean_tables(topo, kind, ranks, chunks):
    ranks = tuple(sorted(ranks))
    root = ranks[0] if kind in ("broadcast", "reduce") else None
    report = check_fred_tables(render_fred_tables(
        _tables(topo, kind, size=len(ranks) * chunks * 4096, ranks=ranks, chunks=chunks,
                root=root)))
    assert report.clean, report.violations[:3]


def test_check_command_exit_codes(teccl, tmp_path):
    texts = render_fred_tables(_tables("fred-b", "allreduce", ranks=tuple(range(8))))
    good, bad, broken = tmp_path / "good", tmp_path / "bad", tmp_path / "broken"
    for d in (good, bad, broken):
        d.mkdir()
        for name, text in texts.items():
            (d / name).write_text(text)
    code, out, _ = teccl("fred", "check", str(good))
    assert code == 0 and "clean" in out
    tables = json.loads(texts["tables.json"])
    _flow_bytes(tables, 10**9)
    for name, text in render_fred_tables(tables).items():
        (bad / name).write_text(text)
    code, out, _ = teccl("fred", "check", str(bad), "--json")
    d = json.loads(out)
    assert code == 1 and not d["clean"] and d["by_rule"]["rate"] >= 1 and d["findings"]
    (broken / "phases.csv").write_text("phase,start_s\n0,x\n")
    code, _, err = teccl("fred", "check", str(broken))
    assert code == 2 and "phases.csv" in err and err.count("\n") == 1
    (broken / "phases.csv").unlink()
    code, _, err = teccl("fred", "check", str(broken))
    assert code == 2 and "phases.csv" in err
    code, _, err = teccl("fred", "check", str(tmp_path / "missing"))
    assert code == 2


_CELLS = st.sampled_from(["", "x", "-1", "0", "7", "1e400", "nan", "mid9", "0+1", "1+1",
                          "True", "s999", "L2", "npu0", "default", "0 0", "L2/mid7/in0"])


@pytest.fixture(scope="module")
def allreduce_texts(allreduce) -> dict[str, str]:
    return render_fred_tables(allreduce)


@settings(max_examples=15, deadline=None)
@given(name=st.sampled_from(["flows.csv", "uswitches.csv", "phases.csv", "ports.csv",
                             "configs.csv", "streams.csv"]),
       row=st.integers(1, 40), column=st.integers(0, 15), cell=_CELLS)
def test_any_edited_cell_is_a_finding_or_an_input_error(allreduce_texts, name, row, column,
                                                        cell):
    """Whatever a cell is edited to, the checker reports violations or refuses the file
    (exit 2); it never fails on its own (exit 70)."""
    texts = allreduce_texts
    lines = texts[name].splitlines()
    cells = lines[row % (len(lines) - 1) + 1].split(",")
    cells[column % len(cells)] = cell
    lines[row % (len(lines) - 1) + 1] = ",".join(cells)
    try:
        check_fred_tables({**texts, name: "\n".join(lines) + "\n"})
    except SpecError as e:
        assert name in str(e)
