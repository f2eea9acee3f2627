"""The mix asks which templates apply to a job on the whole network once per job (and
once more on the view around the others, where it has one)."""

from __future__ import annotations

import te_ccl.jobs.mix as mix
from te_ccl.deadline import Budget
from te_ccl.jobs.spec import jobs_from
from te_ccl.spec.topology import load_topology


def test_applicable_is_asked_once_per_job(monkeypatch):
    asked: list[str] = []
    real = mix.applicable

    def counting(topology, collective):
        asked.append(topology.name)
        return real(topology, collective)

    monkeypatch.setattr(mix, "applicable", counting)
    ranks = [f"b{b}.g{g}" for b in range(2) for g in range(8)]
    jobs = jobs_from(load_topology("ndv2x4"), {"jobs": [
        {"name": "pair", "ranks": ranks, "collective": "allreduce", "size": "64MB"},
        {"name": "box", "ranks": ranks[:8], "collective": "allgather", "size": "64MB"}]},
        None)
    assert mix.templates(jobs, Budget.of(0)) == {"pair": {}, "box": {}}  # nothing lowered
    assert asked == [jobs.topology.name] * 2
