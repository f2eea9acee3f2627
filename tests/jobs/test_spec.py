"""The jobs file: what loads, and every refusal as one located line (exit 2 through the CLI)."""

import pytest

from te_ccl.errors import SpecError
from te_ccl.jobs import load_jobs
from te_ccl.spec.topology import load_topology


@pytest.fixture(scope="module")
def ndv2x4():
    return load_topology("ndv2x4")


def _write(tmp_path, text):
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    return path


def test_a_jobs_file_loads_with_ranks_in_the_jobs_order(ndv2x4, tmp_path):
    path = _write(tmp_path, """jobs:
  - {name: train-a, ranks: [b0.g3, b0.g0, b0.g1, b0.g2], collective: allreduce, size: 256MB}
  - name: train-b
    ranks: [b0.g0, b0.g4, b0.g5, b0.g6, b0.g7, b1.g0, b1.g1]
    collective: broadcast
    size: 64MB
    root: b1.g0
    weight: 2
    deadline: 5ms
    xml: b.xml
""")
    jobs = load_jobs(ndv2x4, path)
    a, b = jobs.jobs
    assert a.ranks == (3, 0, 1, 2) and a.collective.size_bytes == 256 * 10**6
    assert b.collective.root == 8 and b.weight == 2 and b.deadline_s == pytest.approx(5e-3)
    assert b.xml == str(tmp_path / "b.xml")
    assert jobs.overlapping() == [("train-a", "train-b")]  # both have b0.g0: allowed


@pytest.mark.parametrize(("job", "line", "key", "says"), [
    ("{name: x, ranks: [b0.g0, sw], collective: allgather, size: 1MB}", 3, "jobs[1].ranks",
     "is a switch, not a GPU"),
    ("{name: x, ranks: [b0.g0, b9.g0], collective: allgather, size: 1MB}", 3,
     "jobs[1].ranks", "expected a rank, a GPU name"),
    ("{name: a, ranks: [b1.g0, b1.g1], collective: allgather, size: 1MB}", 3, "jobs[1].name",
     "named twice; the first (line 2)"),
    ("{name: x, ranks: [b0.g1, b1.g1], collective: allgather, size: 1MB}", 3, "jobs[1].ranks",
     "b0.g1 and b1.g1 are not connected"),
    ("{name: x, ranks: [b1.g0, b1.g1], collective: custom, size: 1MB}", 3,
     "jobs[1].collective", "expected one of"),
    ("{name: x, ranks: [b1.g0, b1.g1], collective: allgather, size: 1MB, weight: -1}", 3,
     "jobs[1].weight", "positive number"),
    ("{name: x, ranks: [b1.g0, b1.g1], collective: allgather, size: 1MB, colour: red}", 3,
     "jobs[1].colour", "unknown key"),
    ("{name: ../x, ranks: [b1.g0, b1.g1], collective: allgather, size: 1MB}", 3,
     "jobs[1].name", "usable as a file name"),
    ("{name: x, ranks: [b1.g0, b1.g1], collective: allgather, size: 1MB, root: b1.g0}", 3,
     "jobs[1].root", "allgather has no root"),
])
def test_bad_jobs_are_one_located_line(ndv2x4, tmp_path, job, line, key, says):
    path = _write(tmp_path, "jobs:\n  - {name: a, ranks: [b0.g0, b0.g1], collective: "
                            f"allgather, size: 1MB}}\n  - {job}\n")
    with pytest.raises(SpecError) as e:
        load_jobs(ndv2x4, path)
    assert str(e.value).startswith(f"{path}:{line}: {key}: ") and says in str(e.value)
    assert "\n" not in str(e.value)


def test_the_cli_refuses_a_bad_jobs_file_with_exit_2(teccl, tmp_path):
    path = _write(tmp_path, "jobs: []\n")
    code, out, err = teccl("compile", "dgx1", "--jobs", str(path), "-o", str(tmp_path / "o"))
    assert code == 2 and "jobs: expected at least one job" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    code, _, err = teccl("compile", "dgx1", "--jobs", str(path), "-s", "1MB")
    assert code == 2 and "--size does not go with it" in err


def test_the_documented_example_loads():
    from pathlib import Path

    jobs = load_jobs(load_topology("dgx1"), Path(__file__).with_name("dgx1-jobs.yaml"))
    assert [j.name for j in jobs.jobs] == ["bcast", "reduce", "rs"]
    assert jobs.jobs[0].collective.root == 1 and jobs.jobs[1].weight == 2
    assert len(jobs.overlapping()) == 3
