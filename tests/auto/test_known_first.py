"""Candidates built already (``known``: a first file's, the box plan's) are judged once,
before any chunking's race, whatever their chunking, so a race the time limit cuts
short or skips still weighs them."""

from __future__ import annotations

from dataclasses import replace

from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams
from te_ccl.compiler.portfolio import Judge, choose
from te_ccl.deadline import until
from te_ccl.topology.generators import ring


def _recording(fastest: object) -> tuple[Judge, list]:
    """A judge by the prediction, by which ``fastest``'s transfers take no time, and the
    schedules it judged, in order."""
    judged: list = []

    def time(schedule) -> float:
        judged.append(schedule)
        return 0.0 if schedule.transfers is fastest else schedule.finish_time_s

    return Judge("prediction", time), judged


def _inputs():
    topology = ring(4, 1e9)
    collective = Collective(CollectiveKind.ALLGATHER, 1 << 20, tuple(range(4)))
    other = build_baseline("ring", topology, replace(collective, chunks_per_rank=4))
    return topology, collective, other


def test_a_known_candidate_of_another_chunking_is_judged_first_and_kept():
    topology, collective, other = _inputs()
    judge, judged = _recording(other.transfers)
    params = SolveParams(backend="auto", time_limit_s=600, threads=1)
    s = choose(topology, collective, params, judge, chunk_choices=(1, 2),
               known=(("template ring", other),))
    assert judged[0] is other and sum(x is other for x in judged) == 1
    assert s.transfers is other.transfers and s.collective.chunks_per_rank == 4
    assert s.info.notes[0].startswith("auto: kept the template ring")
    assert any(n.startswith("chunks auto: picked 4 per rank") for n in s.info.notes)


def test_a_known_candidate_stands_where_no_race_has_time_to_run():
    topology, collective, other = _inputs()
    judge, judged = _recording(other.transfers)
    params = SolveParams(backend="auto", time_limit_s=600, threads=1)
    with until(0.0):  # the compile's deadline has come
        s = choose(topology, collective, params, judge, chunk_choices=(1, 2, 4),
                   known=(("template ring", other),))
    assert judged == [other] and s.transfers is other.transfers
    assert "skipped (no time left)" in s.info.notes[-1]


def test_a_single_backend_judges_no_known_candidate():
    topology, collective, other = _inputs()
    judge, judged = _recording(other.transfers)
    params = SolveParams(backend="milp", time_limit_s=600, threads=1)
    s = choose(topology, collective, params, judge, known=(("template ring", other),))
    assert other not in judged and s.info.backend == "milp"
