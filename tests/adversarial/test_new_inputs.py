"""Every input of the jobs, warm-start, size-library, topology-edit, wafer-generator,
MSCCL++-plan and plan-sweep commands has its fate: bad input is one line on stderr and
exit 2 (a plan the checker rejects: exit 1), never exit 70 or a traceback, and no output
is left behind; inputs too large to handle are refused before anything large is built,
and an input that is a device or FIFO before it is opened (one would be read without
end, the other blocks).

Commands run in-process through ``main``; a hang is turned into a failure by an alarm.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.cli.main import main
from te_ccl.errors import SpecError
from te_ccl.jobs.spec import jobs_from
from te_ccl.model import footprint
from te_ccl.spec.topology import load_topology
from te_ccl.verify.mscclpp import verify_plan

GOOD_JOB = {"name": "a", "ranks": ["g0", "g1"], "collective": "allgather", "size": "1MB"}
JOB = "jobs: [{name: a, ranks: [g0, g1], collective: allgather, size: 1MB%s}]\n"


@contextlib.contextmanager
def _within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO opened for reading blocks until a writer comes)."""
    def stop(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def teccl(*args: str, seconds: int = 30) -> tuple[int, str]:
    """Exit code and stderr of ``teccl ARGS`` (usable inside hypothesis examples)."""
    out, err = io.StringIO(), io.StringIO()
    with _within(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            return e.code, err.getvalue()
    raise AssertionError("main returned without an exit code")


def assert_refused(code: int, err: str, *needles: str, exit_code: int = 2) -> None:
    """Exit ``exit_code`` with one error line that contains every needle."""
    assert code == exit_code, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("teccl: ")]
    assert len(lines) == 1 and lines[0].startswith("teccl: error: "), err
    for needle in needles:
        assert needle in lines[0], err


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---- jobs files ----

BAD_JOBS = {
    "empty": ("", "empty"),
    "binary": (b"\x00\xff\xfe\x80garbage", "not UTF-8"),
    "truncated": ("jobs:\n  - {name: a, ranks: [g0, g1], collective: allga", "YAML syntax"),
    "a list": ("- 1\n- 2\n", "expected a mapping"),
    "a number": ("42\n", "expected a mapping"),
    "no jobs": ("jobs: []\n", "at least one job"),
    "jobs not a list": ("jobs: {a: 1}\n", "expected a list"),
    "job not a mapping": ("jobs: [[1, 2]]\n", "jobs[0]"),
    "unknown key": (JOB % ", bogus: 1", "jobs[0].bogus"),
    "unknown top key": (JOB + "extra: 1\n", "extra"),
    "duplicate name": ("jobs: [{name: a, ranks: [g0, g1], collective: allgather, size: 1MB},"
                       " {name: a, ranks: [g2, g3], collective: allgather, size: 1MB}]\n",
                       "named twice"),
    "unknown GPU": ("jobs: [{name: a, ranks: [g0, g99], collective: allgather, size: 1MB}]\n",
                    "jobs[0].ranks"),
    "huge rank": ("jobs: [{name: a, ranks: [0, 99999999999999999999], collective: allgather, "
                  "size: 1MB}]\n", "not in the topology"),
    "a million ranks": ("jobs: [{name: a, ranks: '0-999999', collective: allgather, "
                        "size: 1MB}]\n", "not in the topology"),
    "negative rank": ("jobs: [{name: a, ranks: [0, -1], collective: allgather, size: 1MB}]\n",
                      "jobs[0].ranks"),
    "NaN rank": ("jobs: [{name: a, ranks: [0, .nan], collective: allgather, size: 1MB}]\n",
                 "jobs[0].ranks"),
    "one rank": ("jobs: [{name: a, ranks: [g0], collective: allgather, size: 1MB}]\n",
                 "at least 2"),
    "rank twice": ("jobs: [{name: a, ranks: [g0, g0], collective: allgather, size: 1MB}]\n",
                   "twice"),
    "zero size": ("jobs: [{name: a, ranks: [g0, g1], collective: allgather, size: 0}]\n",
                  "jobs[0].size"),
    "huge size": ("jobs: [{name: a, ranks: [g0, g1], collective: allgather, size: 1e30}]\n",
                  "jobs[0].size"),
    "NaN size": ("jobs: [{name: a, ranks: [g0, g1], collective: allgather, size: .nan}]\n",
                 "jobs[0].size"),
    "huge chunks": (JOB % ", chunks: 1000000000", "chunks"),
    "zero weight": (JOB % ", weight: 0", "jobs[0].weight"),
    "infinite weight": (JOB % ", weight: .inf", "jobs[0].weight"),
    "NaN deadline": (JOB % ", deadline: .nan", "jobs[0].deadline"),
    "custom": (JOB.replace("allgather", "custom") % "", "jobs[0].collective"),
    "root of allgather": (JOB % ", root: g0", "has no root"),
    "name with a slash": (JOB.replace("name: a", "name: ../x") % "", "jobs[0].name"),
    "name too long": (JOB.replace("name: a", "name: " + "a" * 300) % "", "at most 128"),
    "nested too deeply": ("jobs: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    "python tag": ("jobs: !!python/object:os.system [ls]\n", "constructor"),
}


@pytest.mark.parametrize("name", BAD_JOBS)
def test_a_bad_jobs_file_is_one_line_and_exit_2_before_anything_is_written(here, name):
    body, needle = BAD_JOBS[name]
    (here / "jobs.yaml").write_bytes(body if isinstance(body, bytes) else body.encode())
    code, err = teccl("compile", "dgx1", "--jobs", "jobs.yaml", "-o", "out")
    assert_refused(code, err, needle)
    assert not (here / "out").exists()
    code, err = teccl("simulate", "dgx1", "--jobs", "jobs.yaml", "out")
    assert_refused(code, err)


_GARBAGE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.lists(st.integers(-3, 10), max_size=4), st.dictionaries(st.text(max_size=3),
                                                               st.integers(), max_size=2))


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(sorted(GOOD_JOB) + ["chunks", "root", "weight", "deadline", "xml"]),
       value=_GARBAGE)
def test_any_value_of_any_job_key_loads_or_is_one_located_line(key, value):
    topo = load_topology("dgx1")
    job = dict(GOOD_JOB, **{key: value})
    try:
        jobs_from(topo, {"jobs": [job]}, "j.yaml")
    except SpecError as e:
        assert "\n" not in str(e) and "j.yaml" in str(e)


# ---- teccl topo edit / topo gen ----

BAD_EDITS = {
    "unknown node": (["--without-link", "g0:g99"], "unknown node"),
    "not a link": (["--without-link", "g0"], "NODE:NODE"),
    "no second end": (["--without-link", "g0>"], "NODE:NODE"),
    "no such link": (["--without-link", "g0:g0"], "no link"),
    "empty factor": (["--scale-link", "g0:g1="], "--scale-link"),
    "no link before the factor": (["--scale-link", "=2"], "--scale-link"),
    "factor 0": (["--scale-link", "g0:g1=0"], "factor > 0"),
    "factor -1": (["--scale-link", "g0:g1=-1"], "factor > 0"),
    "factor nan": (["--scale-link", "g0:g1=nan"], "factor > 0"),
    "factor inf": (["--scale-link", "g0:g1=inf"], "factor > 0"),
    "rate overflows": (["--scale-link", "g0:g1=1e308"], "finite"),
    "rate below 1 B/s": (["--scale-link", "g0:g1=1e-320"], "at least 1B/s"),
    "unknown GPU": (["--without-gpu", "g99"], "--without-gpu"),
    "disconnects": (["--without-link", "g0:g1", "--without-link", "g0:g7"], "disconnects"),
    "nothing": ([], "nothing to change"),
    "name with a space": (["--without-link", "g0:g1", "--name", "a b"], "--name"),
    "name ending a comment": (["--without-link", "g0:g1", "--name", "x-->y"], "--name"),
    "name with a newline": (["--without-link", "g0:g1", "--name", "a\nb"], "--name"),
}


@pytest.mark.parametrize("name", BAD_EDITS)
def test_a_bad_topology_edit_is_one_line_and_writes_nothing(here, name):
    flags, needle = BAD_EDITS[name]
    code, err = teccl("topo", "edit", "ring8", *flags, "-o", "new.yaml")
    assert_refused(code, err, needle)
    assert list(here.iterdir()) == []


@pytest.mark.parametrize("kind", ["fred-a", "fred-d", "wafer-mesh"])
@pytest.mark.parametrize("npus", ["0", "-4", "1", "10000000", "99999999999999999999"])
def test_topo_gen_refuses_npus_no_wafer_has_before_building_it(here, kind, npus):
    code, err = teccl("topo", "gen", kind, "--npus", npus, "-o", "w.yaml", seconds=10)
    assert_refused(code, err, "--npus")
    assert list(here.iterdir()) == []


def test_fred_versus_refuses_npus_no_wafer_has(here):
    for npus in ("0", "3", "10000000"):
        assert_refused(*teccl("fred", "versus", "--npus", npus, seconds=10), "--npus")


# ---- topologies whose numbers the time model cannot hold ----

def _two_links(bandwidth: str) -> str:
    return ("name: t\ngpus: [g0, g1, g2]\nlinks:\n"
            f"  - {{between: [g0, g1], bandwidth: {bandwidth}}}\n"
            "  - {between: [g1, g2], bandwidth: 25GB/s}\n")


@pytest.mark.parametrize("bandwidth", ["1e-3B/s", "1e-300GB/s", "1e300GB/s", "0GB/s"])
def test_a_link_slower_than_1_byte_per_second_or_infinite_is_refused(here, bandwidth):
    (here / "t.yaml").write_text(_two_links(bandwidth))
    code, err = teccl("compile", "t.yaml", "-c", "allgather", "-s", "1MB", "-o", "x.xml")
    assert_refused(code, err, "links[0].bandwidth")
    assert not (here / "x.xml").exists()


def test_a_collective_longer_than_the_schedule_times_hold_is_refused_before_solving(here):
    code, err = teccl("compile", "ring8", "-c", "broadcast", "-s", "100PB", "-o", "x.xml")
    assert_refused(code, err, "size:", "slowest link")
    assert not (here / "x.xml").exists()


# ---- compile --from ----

@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> Path:
    """An AllGather file teccl wrote for ring8."""
    path = tmp_path_factory.mktemp("from") / "ag.xml"
    code, err = teccl("-q", "compile", "ring8", "-c", "allgather", "-s", "1KB", "-o", str(path),
                      "--time-limit", "20", seconds=120)
    assert code == 0, err
    return path


def _from(previous: Path, here: Path) -> dict[str, tuple[str | bytes, list[str], str]]:
    xml = previous.read_text()
    return {  # file body, compile arguments, what the error names
        "empty": ("", [], "not an XML file"),
        "JSON": ("{}", [], "not an XML file"),
        "binary": (b"\x00\xff" * 64, [], "binary"),
        "truncated": (xml[: len(xml) // 2], [], "--from"),
        "huge ngpus": (xml.replace('ngpus="8"', 'ngpus="99999999999"', 1), [], "ngpus"),
        "another collective": (xml, ["-c", "broadcast"], "another collective"),
        "another topology": (xml, ["--topology", "dgx1"], "another network"),
        "provenance a device": (xml.replace("topology=ring8", "topology=/dev/zero", 1),
                                [], ""),
    }


@pytest.mark.parametrize("name", ["empty", "JSON", "binary", "truncated", "huge ngpus",
                                  "another collective", "another topology"])
def test_a_previous_file_that_does_not_fit_is_one_line_and_writes_nothing(
        here, previous, name):
    body, extra, needle = _from(previous, here)[name]
    (here / "prev.xml").write_bytes(body if isinstance(body, bytes) else body.encode())
    topology = extra[1] if extra[:1] == ["--topology"] else "ring8"
    kind = extra[1] if extra[:1] == ["-c"] else "allgather"
    code, err = teccl("compile", topology, "-c", kind, "-s", "1KB", "--from", "prev.xml",
                      "-o", "new.xml", "--time-limit", "10")
    assert_refused(code, err, "prev.xml", "--from", needle)
    assert not (here / "new.xml").exists()


def test_a_previous_file_naming_a_device_as_its_topology_is_not_read_from_it(here, previous):
    body, _, _ = _from(previous, here)["provenance a device"]
    (here / "prev.xml").write_text(body)
    code, err = teccl("-q", "compile", "ring8", "-c", "allgather", "-s", "1KB", "--from",
                      "prev.xml", "-o", "new.xml", "--time-limit", "10", seconds=60)
    assert code == 0, err
    assert_refused(*teccl("simulate", "prev.xml"), "/dev/zero", "character device")


# ---- inputs that are devices or FIFOs ----

def _fifo(d: Path) -> str:
    os.mkfifo(d / "fifo")
    return str(d / "fifo")


@pytest.mark.parametrize("make", [_fifo, lambda d: "/dev/zero"], ids=["FIFO", "device"])
def test_an_input_that_is_a_fifo_or_device_is_refused_before_it_is_opened(here, make):
    path = make(here)
    kind = "FIFO" if "fifo" in path else "character device"
    for args in (["compile", path, "-c", "allgather", "-s", "1MB"],
                 ["compile", "dgx1", "--jobs", path, "-o", "out"],
                 ["compile", "ring8", "-c", "allgather", "-s", "1MB", "--from", path],
                 ["topo", "edit", path, "--without-gpu", "g0"],
                 ["verify", path], ["simulate", "ring8", path]):
        assert_refused(*teccl(*args, seconds=10), path, kind)
    assert sorted(p.name for p in here.iterdir()) in ([], ["fifo"])


# ---- MSCCL++ plans ----

def _plan(**top) -> dict:
    """The smallest plan the checker reads: two ranks, no blocks."""
    gpu = {"input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0, "threadblocks": [],
           "channels": [], "remote_buffers": [], "semaphores": []}
    plan = {"name": "p", "collective": "allreduce", "protocol": "Simple", "inplace": False,
            "gpus": [dict(gpu, id=0), dict(gpu, id=1)]}
    plan.update(top)
    return plan


def _gpu0(**kw) -> dict:
    plan = _plan()
    plan["gpus"][0].update(kw)
    return plan


BAD_PLANS = {
    "no GPUs": _plan(gpus=[]),
    "gpus a string": _plan(gpus="x"),
    "gpus numbers": _plan(gpus=[1, 2]),
    "collective a number": _plan(collective=5),
    "negative chunks": _gpu0(input_chunks=-1),
    "10^12 chunks": _gpu0(input_chunks=10**12),
    "10^6 ops declared": _gpu0(threadblocks=[{"id": 0, "channels": [],
                                              "remote_buffer_refs": [],
                                              "ops": [{"name": "nop"}] * 10**6}]),
    "blocks a string": _gpu0(threadblocks="x"),
    "nested garbage": _gpu0(channels=[[[[{"a": [None]}]]]]),
}


@pytest.mark.parametrize("name", BAD_PLANS)
def test_a_broken_plan_is_rejected_by_verify_and_not_simulated(here, name):
    text = json.dumps(BAD_PLANS[name])
    (here / "p.json").write_text(text)
    assert not verify_plan(text).valid
    code, err = teccl("verify", "p.json")
    assert code == 1 and "Traceback" not in err and "internal error" not in err, err
    assert_refused(*teccl("simulate", "ring8", "p.json", "--size", "1MB"), "p.json",
                   exit_code=1)


@pytest.mark.parametrize("text", ["[]", "5", "null", '"x"', "{", '{"gpus": ' * 50000,
                                  "\ufeff{}"], ids=["list", "number", "null", "string",
                                                    "truncated", "nested", "BOM"])
def test_a_plan_file_that_is_not_a_plan_object_is_one_line(here, text):
    (here / "p.json").write_text(text)
    assert_refused(*teccl("verify", "p.json"), "p.json")
    assert_refused(*teccl("simulate", "ring8", "p.json", "--size", "1MB"))


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(["name", "collective", "protocol", "inplace", "gpus"]),
       value=_GARBAGE)
def test_any_value_of_a_plan_key_is_an_error_or_a_verdict(key, value):
    report = verify_plan(json.dumps(_plan(**{key: value}), default=str))
    assert isinstance(report.valid, bool)
    assert all("\n" not in e for e in report.errors)


# ---- outputs of the new writers ----

def _hazards(d: Path) -> dict[str, str]:
    os.mkfifo(d / "fifo")
    (d / "adir").mkdir()
    (d / "precious").write_text("keep me")
    (d / "link").symlink_to("precious")
    (d / "dirlink").symlink_to("adir")
    return {"fifo": "FIFO", "adir": "is a directory", "link": "symbolic link",
            "dirlink": "symbolic link", "missing/x": "does not exist",
            "precious/x": "not a directory"}


@pytest.fixture
def no_work(monkeypatch):
    """Solving or compiling a job ends the command in exit 70: outputs are checked first."""
    import te_ccl.api
    import te_ccl.compiler.best
    import te_ccl.compiler.pipeline

    def tripwire(*args, **kwargs):
        raise RuntimeError("the work started before the output path was checked")

    for module in (te_ccl.compiler.pipeline, te_ccl.compiler.best):
        monkeypatch.setattr(module, "solve_best", tripwire)
    monkeypatch.setattr(te_ccl.api, "compile", tripwire)  # each job is one te_ccl.compile


def test_every_new_writer_refuses_a_hazardous_output_before_work(here, no_work):
    hazards = _hazards(here)
    writers = [["topo", "gen", "fred-a", "--npus", "8", "-o"],
               ["topo", "edit", "ring8", "--without-link", "g0:g1", "-o"],
               ["compile", "ring8", "-c", "allreduce", "-s", "1MB", "--format", "mscclpp",
                "-o"]]
    for out, message in hazards.items():
        for writer in writers:
            assert_refused(*teccl(*writer, out), out, message)
        if message != "is a directory":
            jobs = here / "jobs.yaml"
            jobs.write_text(JOB % "")
            assert_refused(*teccl("compile", "dgx1", "--jobs", str(jobs), "-o", out), out)
            jobs.unlink()
    assert (here / "precious").read_text() == "keep me"
    assert list((here / "adir").iterdir()) == []
    assert sorted(p.name for p in here.iterdir()) == sorted(
        ["fifo", "adir", "precious", "link", "dirlink"])


def test_finite_factors_are_checked_as_rates_not_only_as_numbers():
    """A factor may be tiny or huge as long as the rate it makes is one a topology holds."""
    from te_ccl.topology.edit import TopologyEdit, edit_topology

    ring = load_topology("ring8")
    slow = edit_topology(ring, TopologyEdit(scale_links=(("g0:g1", 1e-9),)))
    assert math.isclose(slow.link("g0", "g1").bandwidth_Bps,
                        ring.link("g0", "g1").bandwidth_Bps * 1e-9)
    with pytest.raises(SpecError, match="at least 1B/s"):
        edit_topology(ring, TopologyEdit(scale_links=(("g0:g1", 1e-12),)))


def test_more_jobs_than_the_time_limit_can_compile_end_in_exit_3_naming_one(here,
                                                                          monkeypatch):
    """The jobs' compiles share the limit; a job left with no file is exit 3, nothing written."""
    import te_ccl
    from te_ccl.deadline import TimeLimitReached

    def late(*args, **kwargs):
        raise TimeLimitReached("time limit of 5 s reached while building the model")

    monkeypatch.setattr(te_ccl, "compile", late)
    (here / "jobs.yaml").write_text("jobs:\n" + "".join(
        f"  - {{name: j{i}, ranks: [g0, g1], collective: allgather, size: 1MB}}\n"
        for i in range(40)))
    code, err = teccl("compile", "dgx1", "--jobs", "jobs.yaml", "-o", "out", "--time-limit", "5")
    assert code == 3 and "job 'j0': time limit of 5 s" in err
    assert not (here / "out").exists()


def test_links_a_million_times_apart_in_rate_are_refused_before_solving(here):
    """Templates place a transfer epoch by epoch of the fastest link: 1 B/s beside
    25 GB/s would be 2.5e10 epochs each (the compile ran on, past its time limit)."""
    (here / "t.yaml").write_text(_two_links("1B/s"))
    code, err = teccl("compile", "t.yaml", "-c", "allreduce", "-s", "1KB", "-o", "x.xml")
    assert_refused(code, err, "topology:", "times its slowest")
    assert not (here / "x.xml").exists()


@pytest.mark.parametrize("flags", [["--from", "prev.xml"], ["--inplace"], ["--proto", "LL"],
                                   ["--runtime", "rccl"], ["--fred-tables", "t"]],
                         ids=lambda f: f[0])
def test_compile_jobs_refuses_the_flags_it_would_ignore(here, no_work, flags):
    (here / "jobs.yaml").write_text(JOB % "")
    code, err = teccl("compile", "dgx1", "--jobs", "jobs.yaml", *flags, "-o", "out")
    assert_refused(code, err, "--jobs", f"{flags[0]} does not go with it")
    assert not (here / "out").exists()


# ---- compile --sizes ----

@pytest.mark.parametrize(("sizes", "needle"), [
    ("1MB..1KB", "LOW <= HIGH"), ("..1KB", "--sizes"), ("1KB..", "--sizes"),
    ("0..1KB", "positive"), ("-1KB..1KB", "positive"), ("1KB..1KB..2KB", "--sizes"),
    ("nan..inf", "--sizes"), ("1e400..1e500", "at most"), ("1KB", "LOW..HIGH"),
    ("1KB..100PB", "longer than"),  # checked at the largest size before any range
])
def test_an_odd_size_range_is_one_line_and_writes_nothing(here, sizes, needle):
    code, err = teccl("compile", "ring8", "-c", "allgather", "--sizes", sizes, "-o", "lib")
    assert_refused(code, err, needle)
    assert list(here.iterdir()) == []


@pytest.mark.parametrize("flags", [["--size", "64MB"], ["--format", "mscclpp"], ["-o", "-"],
                                   ["--json", "-o", "-"], ["--from", "x.xml"],
                                   ["--runtime", "rccl", "--format", "json"]],
                         ids=lambda f: " ".join(f))
def test_what_a_size_library_cannot_take_is_refused_before_work(here, flags):
    args = ["compile", "ring8", "-c", "allgather", "--sizes", "1KB..1MB", *flags]
    code, err = teccl(*(args if "-o" in flags else [*args, "-o", "lib"]))
    assert_refused(code, err)
    assert list(here.iterdir()) == []


def test_a_size_library_in_the_way_of_one_file_writes_none(here):
    """The second range's file name is a directory: the first file is not left alone."""
    (here / "lib" / "ring8-allgather-1024-2000.xml").mkdir(parents=True)
    code, err = teccl("-q", "compile", "ring8", "-c", "allgather", "--sizes", "1KB..2KB",
                      "-o", "lib", "--time-limit", "2")
    assert_refused(code, err, "ring8-allgather-1024-2000.xml", "is a directory")
    assert [p.name for p in (here / "lib").iterdir()] == ["ring8-allgather-1024-2000.xml"]


# ---- AlltoAll on big tori, alone and as jobs ----

@pytest.mark.parametrize("flags", [["-s", "1GB", "-o", "t.xml"],
                                   ["-s", "1GB", "--format", "mscclpp", "-o", "t.json"],
                                   ["--sizes", "1KB..1GB", "-o", "lib"]], ids=["xml", "plan", "library"])
def test_alltoall_on_a_big_torus_ends_at_once_by_its_first_files_estimate(here, flags):
    """torus32x32's AlltoAll fits memory only as the row AlltoAll, whose first file takes
    ~50 s of CPU by its chunk-hops: a 10 s limit ends before anything is built (exit 3),
    saying the limit to pass."""
    code, err = teccl("compile", "torus32x32", "-c", "alltoall", *flags, "--time-limit", "10",
                      seconds=20)
    assert_refused(code, err, "row AlltoAll's (22,872,064 chunk-hops)", "pass --time-limit",
                   exit_code=3)
    assert list(here.iterdir()) == []


def test_a_row_alltoall_out_of_time_after_all_says_what_its_first_file_needs(here, monkeypatch):
    """Where the estimate let it start (a fake slowdown far below 1) and the limit still
    ran out, the message gives the file's cost by its method, not a pace per transfer."""
    monkeypatch.setattr(footprint, "slowdown", lambda: 0.01)
    code, err = teccl("-q", "compile", "mesh32x32", "-c", "alltoall", "-s", "1MB", "-o",
                      "a.xml", "--time-limit", "1", seconds=20)
    assert_refused(code, err, "the first file (the row AlltoAll's, 32,505,856 chunk-hops) "
                   "needs about", "(72 s of CPU)", exit_code=3)
    assert list(here.iterdir()) == []


def test_a_job_the_compile_refuses_names_the_jobs_file_and_the_job(here):
    (here / "j.yaml").write_text("jobs:\n  - {name: big, ranks: '0-511', collective: alltoall, "
                                 "size: 1GB}\n  - {name: b, ranks: '512-1023', collective: "
                                 "allgather, size: 1MB}\n")
    code, err = teccl("compile", "torus32x32", "--jobs", "j.yaml", "-o", "out", seconds=20)
    assert_refused(code, err, "j.yaml", "job 'big'", "transfers")
    assert sorted(p.name for p in here.iterdir()) == ["j.yaml"]


# ---- simulate --jobs: the jobs' files ----

def _job_files(here: Path) -> None:
    (here / "jobs.yaml").write_text(JOB % "")
    (here / "out").mkdir()


@pytest.mark.parametrize(("make", "needle"), [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: os.mkfifo(p), "FIFO"),
    (lambda p: p.symlink_to("/dev/zero"), "character device"),
    (lambda p: None, "no such file"),
    (lambda p: p.write_text('<algo name="a" proto="Simple" nchannels="1" nchunksperloop="2" '
                            'ngpus="999999" coll="allgather" inplace="0"></algo>'), "ngpus"),
], ids=["directory", "FIFO", "device", "missing", "huge ngpus"])
def test_a_jobs_file_that_is_not_an_msccl_file_is_named_in_one_line(here, make, needle):
    _job_files(here)
    make(here / "out" / "a.xml")
    code, err = teccl("simulate", "dgx1", "--jobs", "jobs.yaml", "out", seconds=10)
    assert_refused(code, err, "out/a.xml", needle)


# ---- MSCCL++ plans: semaphores, ranks and blocks ----

def _with_semaphore(init: int) -> dict:
    plan = _plan()
    plan["gpus"][0]["semaphores"] = [{"init_value": init}]
    return plan


@pytest.mark.parametrize(("plan", "needle"), [
    (_with_semaphore(-1), "negative"),
    (_with_semaphore(10**12), "semaphore 0 ends at"),  # 10^12 credits were held one by one
    (_plan(gpus=[dict(_plan()["gpus"][0], id=0)] * 20000), "id 0"),
    (_plan(gpus=[dict(g, threadblocks=[{"id": j, "ops": [], "channels": [],
                                        "remote_buffer_refs": []} for j in range(8200)])
                 for g in _plan()["gpus"]]), "thread blocks to follow"),
], ids=["negative semaphore", "huge semaphore", "misnumbered ranks", "too many blocks"])
def test_a_plan_too_odd_to_run_is_rejected_at_once(here, plan, needle):
    (here / "p.json").write_text(json.dumps(plan))
    with _within(10):
        report = verify_plan(json.dumps(plan))
    assert not report.valid and any(needle in e for e in report.errors), report.errors[:3]
    assert_refused(*teccl("simulate", "ring8", "p.json", "--size", "1MB", seconds=10),
                   "p.json", exit_code=1)


# ---- sweep --format mscclpp, topo edit --name ----

@pytest.mark.parametrize(("grid", "flags", "needle"), [
    ("collectives: [{collective: broadcast, root: 0}]", [], "no MSCCL++ execution plan"),
    ("collectives: [allgather]\nproto: [Simple, LL128]", [], "Simple protocol; not LL128"),
    ("collectives: [allgather]", ["-o", "-"], "expected a directory"),
], ids=["rooted", "LL128", "stdout"])
def test_a_plan_sweep_refuses_what_has_no_plan_before_running(here, no_work, grid, flags,
                                                             needle):
    (here / "g.yaml").write_text(f"topologies: [ring8]\n{grid}\nsizes: [{{at: 64KB}}]\n")
    args = ["sweep", "g.yaml", "--format", "mscclpp", "--workers", "1"]
    assert_refused(*teccl(*args, *(flags or ["-o", "out"])), needle)
    assert sorted(p.name for p in here.iterdir()) == ["g.yaml"]


@pytest.mark.parametrize("proto", ["LL", "LL128"])
def test_a_plan_in_a_protocol_the_plan_writer_does_not_write_is_refused(here, proto):
    code, err = teccl("compile", "ring8", "-c", "allgather", "-s", "64KB", "--proto", proto,
                      "--format", "mscclpp", "-o", "p.json")
    assert_refused(code, err, f"Simple protocol; not {proto}")
    assert list(here.iterdir()) == []


def test_a_topology_name_too_long_for_a_file_name_is_refused(here):
    code, err = teccl("topo", "edit", "ring8", "--without-link", "g0:g1", "--name", "a" * 300,
                      "-o", "new.yaml")
    assert_refused(code, err, "--name", "at most 128")
    assert list(here.iterdir()) == []


def test_a_jobs_output_with_a_job_file_in_the_way_is_refused_before_compiling(here, no_work):
    (here / "jobs.yaml").write_text(JOB % "")
    (here / "out" / "a.xml").mkdir(parents=True)
    code, err = teccl("compile", "dgx1", "--jobs", "jobs.yaml", "-o", "out")
    assert_refused(code, err, "out/a.xml", "is a directory")
    assert [p.name for p in (here / "out").iterdir()] == ["a.xml"]


def test_a_jobs_xml_key_too_long_for_a_file_name_is_one_line(here):
    (here / "jobs.yaml").write_text(JOB % f", xml: {'a' * 5000}")
    code, err = teccl("simulate", "dgx1", "--jobs", "jobs.yaml", ".", seconds=10)
    assert_refused(code, err, "cannot look at it", "job 'a'")


@pytest.mark.parametrize("args", [["compile", "{}", "-c", "allgather", "-s", "1MB"],
                                  ["topo", "edit", "{}", "--without-gpu", "g0"]],
                         ids=["compile", "topo edit"])
def test_a_topology_path_too_long_for_the_file_system_is_one_line(here, args):
    long = "a" * 5000
    assert_refused(*teccl(*(a.format(long) for a in args)), "cannot look at it")
    assert list(here.iterdir()) == []


def test_verify_of_a_teccl_schedule_says_what_it_is(here):
    (here / "s.json").write_text(json.dumps({"schema": "teccl-schedule/1", "transfers": []}))
    assert_refused(*teccl("verify", "s.json"), "s.json", "a teccl schedule, not an MSCCL++ plan")


@pytest.mark.parametrize("extra", [", chunks: 7", ""], ids=["chunks 7", "1 byte"])
def test_jobs_whose_chunks_do_not_divide_their_size_are_compiled(here, extra):
    """The joint flow model needs one chunk size; where there is none it is not a
    candidate (it ended in exit 70)."""
    body = JOB % extra
    (here / "jobs.yaml").write_text(body if extra else body.replace("size: 1MB", "size: 1B"))
    code, err = teccl("-q", "compile", "dgx1", "--jobs", "jobs.yaml", "-o", "out",
                      "--time-limit", "600", seconds=30)  # it ends on its own in about 1 s
    assert code == 0, err
    assert [p.name for p in (here / "out").iterdir()] == ["a.xml"]
