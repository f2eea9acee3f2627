"""``teccl baseline`` reports the replay of the file it writes: the MSCCL XML as the runtime
runs it (as ``teccl simulate FILE.xml`` does), the schedule's own replay kept apart; the XML
is written only once the verifier accepts it."""

from __future__ import annotations

import json

import pytest

import te_ccl.lower.msccl as msccl_lowering

# the schedule replay and the XML replay of this baseline differ
PIPELINE = ("baseline", "pipeline", "dgx1", "-c", "broadcast", "-s", "16MB")


def _replayed(teccl, path) -> float:
    code, out, err = teccl("simulate", "dgx1", str(path), "--json")
    assert code == 0, err
    return json.loads(out)["finish_time_s"]


def test_the_summary_is_the_written_xml_replay(teccl, tmp_path):
    out = tmp_path / "p.xml"
    code, stdout, err = teccl(*PIPELINE, "-o", str(out), "--json")
    assert code == 0, err
    info = json.loads(stdout)
    assert info["measured_by"] == "xml replay"
    assert info["finish_time_s"] == pytest.approx(_replayed(teccl, out), rel=1e-12)
    assert info["schedule_replay_s"] != pytest.approx(info["finish_time_s"], rel=1e-6)
    assert info["algbw_GBps"] == pytest.approx(16e6 / info["finish_time_s"] / 1e9)
    assert info["bound_ratio"] == pytest.approx(info["finish_time_s"] / info["lower_bound_s"])


def test_the_printed_summary_names_its_measure(teccl, tmp_path):
    code, stdout, err = teccl(*PIPELINE, "-o", str(tmp_path / "p.xml"))
    assert code == 0, err
    assert "timed by the xml replay" in stdout


def test_a_schedule_json_is_timed_by_its_own_replay(teccl, tmp_path):
    code, stdout, err = teccl(*PIPELINE, "-o", str(tmp_path / "p.json"), "--json")
    assert code == 0, err
    info = json.loads(stdout)
    assert info["measured_by"] == "schedule replay"
    assert info["finish_time_s"] == info["schedule_replay_s"]


def test_chunks_auto_keeps_the_file_it_timed(teccl, tmp_path):
    out = tmp_path / "a.xml"
    code, stdout, err = teccl("baseline", "pipeline", "dgx1", "-c", "broadcast", "-s", "1MB",
                              "--chunks", "auto", "-o", str(out), "--json")
    assert code == 0, err
    info = json.loads(stdout)
    assert any("by the xml replay of each file" in n for n in info["notes"])
    assert info["finish_time_s"] == pytest.approx(_replayed(teccl, out), rel=1e-12)


def test_a_refused_xml_is_not_written(teccl, tmp_path, monkeypatch):
    lower = msccl_lowering.lower_to_msccl

    def misplaced(*args, **kw) -> bytes:  # GPU 0's own chunk copied to the wrong slot
        return lower(*args, **kw).replace(b'type="cpy" srcbuf="i" srcoff="0" dstbuf="o" '
                                          b'dstoff="0"', b'type="cpy" srcbuf="i" srcoff="0" '
                                          b'dstbuf="o" dstoff="1"', 1)

    monkeypatch.setattr(msccl_lowering, "lower_to_msccl", misplaced)
    out = tmp_path / "r.xml"
    code, _, err = teccl("baseline", "ring", "ring8", "-c", "allgather", "-s", "1MB",
                         "-o", str(out))
    assert code == 1 and "failed verification" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
