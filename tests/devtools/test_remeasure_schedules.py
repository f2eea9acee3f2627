"""``ship_schedules --remeasure``: the index and summaries take the replay of the shipped
XML again, without solving; a file the verifier rejects is withdrawn."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from devtools.ship_schedules import main, remeasure_all, ship_all
from te_ccl.cli.main import cli

MEASURED = ("finish_time_s", "algbw_GBps", "bound_ratio", "measured_by")
HANG_S = 600  # the run's budget only guards against a hang: its child is killed after it,
#              and a busy machine must not turn a slow solve into a skipped combination


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shipped")
    (entry,) = ship_all(out, budget_s=HANG_S, max_limit_s=10, topologies=["fc8"],
                        kinds=("allgather",))
    assert entry["status"] == "ok" and entry["measured_by"] == "xml replay"
    return out


@pytest.fixture
def schedules(shipped, tmp_path) -> Path:
    return Path(shutil.copytree(shipped, tmp_path / "schedules"))


def _read(path: Path):
    return json.loads(path.read_text())


def _tamper(path: Path, index: int | None = None) -> None:
    data = _read(path)
    target = data if index is None else data[index]
    target.update(finish_time_s=1.0, algbw_GBps=0.067, bound_ratio=3000.0,
                  measured_by="epoch model")
    path.write_text(json.dumps(data))


def test_remeasure_restores_the_replay_of_the_files(shipped, schedules):
    shipped_entry = _read(shipped / "index.json")[0]
    shipped_info = _read(shipped / "fc8" / "allgather.json")
    _tamper(schedules / "index.json", 0)
    _tamper(schedules / "fc8" / "allgather.json")

    (entry,) = remeasure_all(schedules)

    assert _read(schedules / "index.json") == [entry]
    info = _read(schedules / "fc8" / "allgather.json")
    for key in MEASURED:
        assert entry[key] == pytest.approx(shipped_entry[key]), key
        assert info[key] == pytest.approx(shipped_info[key]), key
    assert info["busbw_GBps"] == pytest.approx(shipped_info["busbw_GBps"])
    readme = (schedules / "README.md").read_text()
    assert f"| fc8 | 8 | allgather | ok | MSCCL XML | {entry['finish_time_s'] * 1e6:.1f} us | xml replay" \
        in readme
    assert "3000" not in readme


def test_remeasure_reports_what_teccl_simulate_reports(schedules):
    (entry,) = remeasure_all(schedules)
    result = CliRunner().invoke(cli, ["simulate", str(schedules / "fc8" / "allgather.xml"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    simulated = json.loads(result.stdout)
    for key in ("finish_time_s", "algbw_GBps", "bound_ratio"):
        assert entry[key] == pytest.approx(simulated[key]), key


def test_a_file_the_verifier_rejects_is_withdrawn(schedules):
    inplace = schedules / "fc8" / "allgather.inplace.xml"
    text = inplace.read_text()
    assert 'type="r"' in text
    inplace.write_text(text.replace('type="r"', 'type="nop"', 1))  # a send nobody receives

    (entry,) = remeasure_all(schedules)

    assert entry["status"] == "skipped"
    assert entry["reason"].startswith("removed: fc8/allgather.inplace.xml fails the verifier")
    assert not any((schedules / "fc8").iterdir())
    assert _read(schedules / "index.json") == [entry]
    assert "| fc8 | 8 | allgather | skipped: removed:" in (schedules / "README.md").read_text()


@pytest.mark.parametrize("name, reason", [
    ("allgather.xml", "removed: fc8/allgather.xml cannot be read"),
    ("allgather.json", "removed: fc8/allgather.json is missing"),
])
def test_an_entry_whose_file_is_missing_is_withdrawn(schedules, name, reason):
    (schedules / "fc8" / name).unlink()
    (entry,) = remeasure_all(schedules)
    assert entry["status"] == "skipped" and entry["reason"].startswith(reason)
    assert not any((schedules / "fc8").iterdir())


def test_remeasure_leaves_other_topologies_alone(schedules):
    _tamper(schedules / "index.json", 0)
    assert remeasure_all(schedules, topologies=["dgx1"]) == []
    assert _read(schedules / "index.json")[0]["bound_ratio"] == 3000.0


@pytest.mark.parametrize("args, message", [
    (["--remeasure", "--max-file-size", "256KiB"], "--max-file-size applies to compiling"),
    (["--remeasure"], "no index to remeasure"),
])
def test_remeasure_refuses_what_it_cannot_do(tmp_path, args, message):
    result = CliRunner().invoke(main, [str(tmp_path), *args])
    assert result.exit_code == 2 and message in result.output
