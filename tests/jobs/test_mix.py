"""The mix candidate's search: coordinate descent over each job's files, replayed together."""

from types import SimpleNamespace

import te_ccl.jobs.mix as mix_module
from te_ccl.deadline import Budget
from te_ccl.jobs.mix import JobFile, mix

JOBS = SimpleNamespace(jobs=[SimpleNamespace(name="a"), SimpleNamespace(name="b")])


def _files(name: str, n: int) -> list[JobFile]:
    return [JobFile(f"{name}{i}".encode(), None, f"{name}{i}") for i in range(n)]


def _replaying(table: dict[tuple[str, str], tuple[float, float]], seen: list):
    """A replay whose finishes (a, b) are looked up by the pair of files."""
    def replay(_jobs, algos):
        seen.append((algos["a"], algos["b"]))
        a, b = table[(algos["a"], algos["b"])]
        return SimpleNamespace(finish_s={"a": a, "b": b})
    return replay


def _score(finish):
    return 0, finish["a"] + 2 * finish["b"]


def test_descent_keeps_what_improves_until_a_pass_improves_nothing(monkeypatch):
    a, b = _files("a", 2), _files("b", 2)
    # a1 alone is worse (a0 b0 → a1 b0), but with b1 it is the best pair
    table = {("a0", "b0"): (5, 5), ("a1", "b0"): (6, 5), ("a0", "b1"): (5, 4),
             ("a1", "b1"): (3, 3)}
    seen: list = []
    monkeypatch.setattr(mix_module, "replay_together", _replaying(table, seen))
    chosen, finish = mix(JOBS, {"a": a, "b": b}, {"a": a[0], "b": b[0]}, _score,
                         Budget.of(60))
    assert (chosen["a"].algo, chosen["b"].algo) == ("a1", "b1")
    assert finish == {"a": 3, "b": 3}


def test_no_time_left_keeps_the_start(monkeypatch):
    a, b = _files("a", 2), _files("b", 2)
    seen: list = []
    monkeypatch.setattr(mix_module, "replay_together",
                        _replaying({("a0", "b0"): (5, 5)}, seen))
    chosen, _ = mix(JOBS, {"a": a, "b": b}, {"a": a[0], "b": b[0]}, _score, Budget.of(0))
    assert (chosen["a"].algo, chosen["b"].algo) == ("a0", "b0") and len(seen) == 1


def test_templates_are_verified_files_of_each_job_in_turn():
    from te_ccl.jobs.mix import templates
    from te_ccl.jobs.spec import jobs_from
    from te_ccl.spec.topology import load_topology

    dgx1 = load_topology("dgx1")
    jobs = jobs_from(dgx1, {"jobs": [
        {"name": "ag", "ranks": ["g0", "g1", "g2", "g3"], "collective": "allgather",
         "size": "1MB"},
        {"name": "ar", "ranks": ["g1", "g0", "g5", "g4"], "collective": "allreduce",
         "size": "2MB"}]}, None)
    made = templates(jobs, Budget.of(60))
    assert made["ag"] and made["ar"]
    for files in made.values():
        assert all(f.algo.ngpus == 4 and f.schedule.topology is dgx1 for f in files.values())
    assert templates(jobs, Budget.of(0)) == {"ag": {}, "ar": {}}
