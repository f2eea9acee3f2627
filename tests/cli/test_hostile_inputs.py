"""Hostile inputs a user can write end in one line and exit 2, never an internal error
(70), a hang or a file written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from te_ccl.cli.main import main


@pytest.fixture
def teccl(in_process):
    return in_process(main)


def _ring(tmp_path: Path, bandwidth: str = "25GB/s", latency: str = "1us") -> str:
    path = tmp_path / "t.yaml"
    path.write_text(f"generator: {{kind: ring, n: 8, bandwidth: {bandwidth}, latency: {latency}}}\n"
                    "links:\n  - {between: [g0, g4], bandwidth: 25GB/s}\n")
    return str(path)


def _refused(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.startswith("teccl: error: ") and err.count("\n") == 1, err
    assert all(w in err for w in words), err


@pytest.mark.parametrize("command", ["compile", "baseline"])
@pytest.mark.parametrize("bandwidth, latency, size, words", [
    ("25GB/s", "1e12s", "1MB", ("latency of 1e+12 s", "1e+06 s")),
    ("1B/s", "1us", "1MB", ("more than 1e+06 times",)),
    ("25GB/s", "1us", "100PB", ("size:", "1e+06 s")),
])
def test_times_a_schedule_cannot_hold_are_refused(teccl, tmp_path, command, bandwidth,
                                                  latency, size, words):
    topo = _ring(tmp_path, bandwidth, latency)
    out = tmp_path / "o.xml"
    head = ("compile", topo, "--time-limit", "5") if command == "compile" else (
        "baseline", "ring", topo)
    code, _, err = teccl(*head, "-c", "allgather", "-s", size, "-o", str(out))
    _refused(code, err, *words)
    assert not out.exists()


def test_a_plan_with_nan_or_infinity_is_not_json(teccl, tmp_path):
    plan = tmp_path / "p.json"
    code, _, err = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB", "--time-limit", "5",
                         "--format", "mscclpp", "-o", str(plan))
    assert code == 0, err
    valid = plan.read_text()
    for word in ("NaN", "Infinity", "-Infinity"):
        plan.write_text(valid.replace('"min_message_size":0', f'"min_message_size":{word}', 1))
        for args in (("verify", str(plan)), ("simulate", "ring8", str(plan), "-s", "1MB")):
            code, _, err = teccl(*args)
            _refused(code, err, "p.json", f"not JSON ({word} is not a JSON number)")


@pytest.mark.parametrize("args, words", [
    (("show", "-p", "1000000"), ("FRED_3(1000000)", "µSwitches, more than")),
    (("show", "--m", "1000000"), ("FRED_1000000(8)", "µSwitches, more than")),
    (("route", "-p", "100000000", "--flow", "0:1"), ("µSwitches, more than",)),
])
def test_a_fred_switch_too_large_to_build_is_refused_at_once(teccl, args, words):
    code, _, err = teccl("fred", *args)
    _refused(code, err, *words)


@pytest.mark.parametrize("text, words", [
    ("ports: 6.5\n", ("p.yaml", "ports: expected an integer, got 6.5")),
    ("ports: 6\nm: true\n", ("p.yaml", "m: expected an integer, got True")),
    ("ports: 0\n", ("at least 2 ports, got 0",)),
    (b"\xff\xfe\x00", ("p.yaml", "not UTF-8")),
])
def test_a_bad_fred_phase_file_is_refused(teccl, tmp_path, text, words):
    flows = "flows:\n  - {id: 0, inputs: [1, 2], outputs: [0]}\n"
    path = tmp_path / "p.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text + flows)
    code, _, err = teccl("fred", "route", "--phase", str(path))
    _refused(code, err, *words)


@pytest.mark.parametrize("command", [("phase",), ("evaluate", "-w", "gpt3")])
def test_a_fred_wafer_beyond_the_generators_cap_is_refused_at_once(teccl, command):
    code, _, err = teccl("fred", *command, "--npus", "100000000")
    _refused(code, err, "npus: too many NPUs (100000000); at most 65536")


SMI = ("\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\n"
       "GPU0\t X \tNV0\tNV1\tSYS\t0-23\n"
       "GPU1\tNV0\t X \tNV1\tNV1\t0-23\n"
       "GPU2\tNV1\tNV1\t X \tNV2\t0-23\n"
       "GPU3\tSYS\tNV1\tNV2\t X \t0-23\n")


def test_an_nvidia_smi_matrix_with_nv0_is_refused(teccl, tmp_path):
    (tmp_path / "smi.txt").write_text(SMI)
    code, _, err = teccl("topo", "import", str(tmp_path / "smi.txt"))
    _refused(code, err, "smi.txt:2", "unknown link code 'NV0'")


def test_topo_import_of_a_fifo_is_refused_without_opening_it(teccl, tmp_path):
    os.mkfifo(tmp_path / "dump")
    code, _, err = teccl("topo", "import", str(tmp_path / "dump"))
    _refused(code, err, "is a FIFO")


def test_fred_tables_past_the_deadline_exit_3_and_write_no_table(teccl, tmp_path, monkeypatch):
    import te_ccl.compiler.pipeline as pipeline
    import te_ccl.compiler.render as render
    from te_ccl.deadline import TimeLimitReached, until

    routed = render.planned_tables

    def late(*args):  # the tables' stages run with their deadline already past
        with until(0.0):
            return routed(*args)

    def no_search(*args):  # the first file only: the search is cut short at once
        raise TimeLimitReached("time limit reached while searching")

    monkeypatch.setattr(pipeline, "solve_best", no_search)
    monkeypatch.setattr(render, "planned_tables", late)
    tables, xml = tmp_path / "T", tmp_path / "o.xml"
    code, _, err = teccl("compile", "fred-a", "-c", "allgather", "-s", "1MB", "--time-limit",
                         "600", "-o", str(xml), "--fred-tables", str(tables))
    assert code == 3, err
    last = err.splitlines()[-1]
    assert "FRED switch tables" in last and "nothing was written" in last, err
    assert "flows) take ~" in last, err  # how long they would take
    assert not tables.exists() and not xml.exists()  # no file without its tables


def test_jobs_of_one_collective_on_the_same_ranks_share_one_compile(tmp_path, monkeypatch):
    import te_ccl
    from te_ccl.jobs.joint import compile_jobs
    from te_ccl.jobs.spec import load_jobs
    from te_ccl.spec.topology import load_topology

    (tmp_path / "j.yaml").write_text("jobs:\n" + "".join(
        f"  - {{name: j{i}, ranks: [g0, g1], collective: allgather, size: 1KB}}\n"
        for i in range(40)))
    calls = []
    real = te_ccl.compile
    monkeypatch.setattr(te_ccl, "compile", lambda *a, **k: calls.append(k) or real(*a, **k))
    compile_jobs(load_jobs(load_topology("dgx1"), tmp_path / "j.yaml"), tmp_path / "out",
                 time_limit_s=3)
    assert len(list((tmp_path / "out").glob("*.xml"))) == 40
    alone = [Path(c["output"]).name for c in calls if "output" in c]
    assert [name for name in alone if name.startswith("alone-")] == ["alone-j0.xml"]



def test_size_ranges_share_one_time_limit():
    from types import SimpleNamespace

    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.compiler.sizes import compile_size_ranges, size_ranges
    from te_ccl.deadline import SHARES, TimeLimitReached, left, until

    seen: list[float] = []
    n = len(size_ranges(1000, 10**9))

    def compile_one(_collective):  # spends nothing: each range sees the share it is given
        seen.append(left())
        if len(seen) == n:
            raise TimeLimitReached("time limit of 10 s reached while building the model")
        return SimpleNamespace(collective=SimpleNamespace(chunks_per_rank=1),
                               transfers=(len(seen),))

    gather = Collective(CollectiveKind.ALLGATHER, 1000, tuple(range(8)))
    with until(10.0):
        items = compile_size_ranges(gather, 1000, 10**9, compile_one)
    assert items[-1].schedule is None and f"({n} of {n}" in items[-1].why  # no cheap one
    assert len(seen) == n and seen[0] <= 10 * SHARES.ranges / n  # an even share of it
    assert max(seen) <= 10 * SHARES.ranges  # what a range leaves goes to those after it


def test_an_epoch_far_too_short_says_its_count_in_scientific_form(teccl, tmp_path):
    code, _, err = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB", "--epoch",
                         "1e-300s", "--time-limit", "5", "-o", str(tmp_path / "o.xml"))
    _refused(code, err, "epoch:", "in 3.2e+294 epochs")


def test_topo_edit_refuses_a_gpu_named_twice(teccl, tmp_path):
    out = tmp_path / "e.yaml"
    code, _, err = teccl("topo", "edit", "dgx1", "--without-gpu", "g1", "--without-gpu", "g1",
                         "-o", str(out))
    _refused(code, err, "--without-gpu", "'g1' twice")
    assert not out.exists()


def test_simulating_a_schedule_on_a_topology_without_its_links_names_the_file(teccl, tmp_path):
    sched = tmp_path / "s.json"
    code, _, err = teccl("baseline", "ring", "ring8", "-c", "allgather", "-s", "1MB",
                         "-o", str(sched))
    assert code == 0, err
    code, _, err = teccl("simulate", "dgx1", str(sched))
    assert code == 1 and err.count("\n") == 1, err
    assert f"{sched}: not simulated on dgx1: " in err and "no link" in err, err


def test_simulate_jobs_with_a_file_of_another_collective_is_exit_2(teccl, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = teccl("baseline", "ring", "dgx1", "-c", "allgather", "-s", "1MB", "--ranks",
                         "0-3", "-o", str(out / "a.xml"))
    assert code == 0, err
    xml = out / "a.xml"
    xml.write_text(xml.read_text().replace('coll="allgather"', 'coll="broadcast"'))
    (tmp_path / "j.yaml").write_text(
        "jobs:\n  - {name: a, ranks: [g0, g1, g2, g3], collective: allgather, size: 1MB}\n")
    code, _, err = teccl("simulate", "dgx1", "--jobs", str(tmp_path / "j.yaml"), str(out))
    _refused(code, err, "a.xml", "coll: the file is a broadcast, job 'a' a allgather")


def test_a_size_range_out_of_its_share_takes_the_first_cheap_candidate():
    from dataclasses import dataclass, replace

    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.compiler.sizes import compile_size_ranges, size_ranges
    from te_ccl.deadline import TimeLimitReached, until

    @dataclass(frozen=True)
    class Cheap:  # what sizes.py reads of a schedule
        transfers: tuple
        collective: object
        info: object

        def with_info(self, notes):
            return replace(self, info=type(self.info)(notes=notes))

    @dataclass(frozen=True)
    class Info:
        notes: tuple = ()

    def out_of_time(_collective):
        raise TimeLimitReached("time limit of 10 s reached while building the model")

    def first(c):
        return Cheap((c.size_bytes,), c, Info())

    gather = Collective(CollectiveKind.ALLGATHER, 1000, tuple(range(8)))
    with until(10.0):
        items = compile_size_ranges(gather, 1000, 10**6, out_of_time, first=first)
    assert len(items) == len(size_ranges(1000, 10**6))
    assert all("first cheap candidate kept" in i.schedule.info.notes[0] for i in items)
