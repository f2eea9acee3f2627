"""The pipeline's choices: judged by the replay of the lowered XML, over the chunkings of
--chunks auto."""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType

import pytest

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import Timer, solve_best
from te_ccl.compiler.chunking import BASE_CHUNKS, chunk_candidates, chunking_bounds, quantization
from te_ccl.compiler.solve import PREDICTED, SolveParams, solve
from te_ccl.simulate import simulate_schedule
from te_ccl.spec.topology import load_topology
from te_ccl.verify.schedule_check import check_schedule

AUTO = SolveParams(time_limit_s=10, threads=1)
GB = 10**9


def coll(kind: str, n: int, size: int = GB, chunks: int = 1, root: int | None = None):
    return Collective(CollectiveKind(kind), size, tuple(range(n)), chunks, root=root)


def xml_time(schedule) -> float:
    return Timer().judge(schedule)


def test_replay_judge_is_not_fooled_by_what_the_epoch_model_undersells():
    """ring8 Broadcast of 1 GB in one chunk: the bidirectional ring's halves take 0.14 s in
    the epoch model but 0.07 s replayed. Judged by the XML replay, auto keeps a schedule
    no slower than the epoch model's pick nor that template."""
    from te_ccl.baselines import build_baseline

    ring8, c = load_topology("ring8"), coll("broadcast", 8, root=0)
    by_epochs = solve(ring8, c, AUTO, judge=PREDICTED)
    by_xml = solve_best(ring8, c, AUTO)
    template = build_baseline("ring-bidir", ring8, c)
    assert template.finish_time_s > 1.5 * simulate_schedule(template).finish_time_s
    assert xml_time(by_xml) <= min(xml_time(by_epochs), xml_time(template)) * (1 + 1e-9)
    assert "replay of the lowered XML" in by_xml.info.notes[0] and check_schedule(by_xml) == []


def test_candidates_include_the_exact_chunkings():
    """torus 4×4: 15 chunks over 4 in-links per GPU, exact at 4 per rank; dgx1: 7 over
    1+1+2+2 link units, exact at 6 (when 48 pieces divide the size; 1 GB = 10⁹ bytes
    does not, and 20 per rank come within 1 %)."""
    torus, dgx1 = load_topology("torus4x4"), load_topology("dgx1")
    ag16, ag8 = coll("allgather", 16), coll("allgather", 8, size=48 << 20)
    assert 4 in chunk_candidates(torus, ag16)
    assert quantization(torus, ag16, 1) == pytest.approx(16 / 15, rel=1e-3)
    assert quantization(torus, ag16, 4) == pytest.approx(1.0, rel=1e-6)
    assert 6 in chunk_candidates(dgx1, ag8)
    assert quantization(dgx1, ag8, 6) == pytest.approx(1.0, rel=1e-6)
    assert quantization(dgx1, ag8, 1) == pytest.approx(1.5 / (7 / 6), rel=1e-3)
    gb = chunk_candidates(dgx1, coll("allgather", 8))
    assert 6 not in gb and max(quantization(dgx1, coll("allgather", 8), k) for k in
                               set(gb) - set(BASE_CHUNKS)) <= 1.01
    assert chunk_candidates(dgx1, coll("allgather", 8, size=1000)) == BASE_CHUNKS  # α-bound


def test_chunking_bound_is_below_every_simulated_schedule():
    ring8 = load_topology("ring8")
    for k in (1, 2):
        c = coll("allgather", 8, chunks=k)
        s = solve(ring8, c, SolveParams(backend="milp", time_limit_s=600, threads=1))
        assert chunking_bounds(ring8, c, [k])[k] <= simulate_schedule(s).finish_time_s * (1 + 1e-9)


def test_auto_chunks_finds_the_exact_chunking_and_skips_what_cannot_win():
    """A 4-GPU ring, flow model only: 3 chunks over 2 in-links quantize badly at 1 per rank
    (2 chunk times instead of 1.5), exactly at 2; 4 and 8 cannot beat that by 2 %, so
    they are not solved."""
    from te_ccl.topology import Link, Node, Topology

    links = [Link(f"g{i}", f"g{(i + d) % 4}", 1e9) for i in range(4) for d in (1, 3)]
    ring4 = Topology.build("ring4", [Node(f"g{i}") for i in range(4)], links)
    milp = SolveParams(backend="milp", time_limit_s=600, threads=1)  # it proves in < 1 s
    s = solve_best(ring4, coll("allgather", 4, size=4 << 20), milp, BASE_CHUNKS)
    assert s.collective.chunks_per_rank == 2 and check_schedule(s) == []
    note = s.info.notes[-1]
    assert note.startswith("chunks auto: picked 2 per rank by replay of the lowered XML")
    assert "4: skipped (bound" in note and "8: skipped (bound" in note
    one = solve_best(ring4, coll("allgather", 4, size=4 << 20), milp)
    assert xml_time(s) < xml_time(one) / 1.3


def test_auto_chunks_keeps_the_given_chunking_when_none_divides():
    ring8 = load_topology("ring8")
    s = solve_best(ring8, coll("allgather", 8, size=1001), AUTO, BASE_CHUNKS)
    # the given chunking (the scale backend may cut each chunk into sub-chunks)
    assert s.collective.chunks_per_rank == s.info.subchunks and s.collective.size_bytes == 1001


@pytest.mark.slow
def test_auto_chunks_is_never_slower_than_the_given_chunking():
    ring8 = load_topology("ring8")
    c = replace(coll("broadcast", 8, root=0), size_bytes=8 << 20)
    auto = solve_best(ring8, c, AUTO, BASE_CHUNKS)
    assert xml_time(auto) <= xml_time(solve_best(ring8, c, AUTO)) * (1 + 1e-9)


def test_cheap_bounds_settle_the_templates_without_replaying_them(monkeypatch):
    """fc8 AllGather judged by the schedule replay (the fallback above the XML replay's
    limit): the flow schedule's prediction bounds its replay from above (no link starts
    two chunks in one epoch) and every template's busiest link from below is no earlier,
    so no template is replayed to choose (even when a schedule at the lower bound does
    not already settle them all)."""
    import te_ccl.backends.scale as scale
    import te_ccl.compiler.portfolio as auto
    from te_ccl.compiler.judge import _busiest_link, _prediction_bounds_replay

    monkeypatch.setattr(auto, "BOUND_GAP", -1.0)
    monkeypatch.setattr(scale, "scale_method", lambda *a: None)  # the flow model's schedule
    fc8, c = load_topology("fc8"), coll("allgather", 8)
    s = solve_best(fc8, c, AUTO, judge=Timer(xml=False).judge)
    note = s.info.notes[0]
    assert note.startswith("auto: kept the flow model")
    templates = [p for p in note.split("; ") if p.startswith("template ")]
    assert templates and all("skipped (cannot finish before" in p for p in templates)
    sim = simulate_schedule(s).finish_time_s
    assert _busiest_link(s) <= sim * (1 + 1e-9) and sim <= _prediction_bounds_replay(s) * (1 + 1e-9)
    two_in_one_epoch = replace(s, transfers=s.transfers + s.transfers[:1])
    assert _prediction_bounds_replay(two_in_one_epoch) is None
    for k in (1, 2):  # the busiest link bounds the templates' replays too
        from te_ccl.baselines import build_baseline

        ring = build_baseline("ring", fc8, coll("allgather", 8, chunks=k))
        assert _busiest_link(ring) <= simulate_schedule(ring).finish_time_s * (1 + 1e-9)


def _collector_states(monkeypatch, module: ModuleType, name: str) -> list[bool]:
    """Whether the cycle collector is on at each call of ``module.<name>``."""
    import gc

    seen: list[bool] = []
    real = getattr(module, name)

    def recorded(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return seen


def test_a_compile_solves_lowers_and_verifies_without_the_cycle_collector(tmp_path, monkeypatch):
    """Its passes build millions of objects and no cycles: the collector's passes over
    them (seconds at 1024 GPUs) are left out, and it is back on afterwards."""
    import gc

    from te_ccl.compiler import pipeline

    seen = _collector_states(monkeypatch, pipeline, "solve_best")
    assert gc.isenabled()
    result = pipeline.compile_collective(
        load_topology("ring8"), coll("allgather", 8, 10**6), AUTO,
        pipeline.CompileOptions(output=str(tmp_path / "ag.xml")))
    assert seen == [False] and gc.isenabled() and result.output


def test_a_size_library_compiles_every_size_without_the_cycle_collector(tmp_path, monkeypatch):
    """The size library's compiles are compiles too (see the test above)."""
    import gc

    from te_ccl.compiler import pipeline

    seen = _collector_states(monkeypatch, pipeline, "solve_checked")
    results = pipeline.compile_size_library(load_topology("ring8"), coll("allgather", 8),
                                            AUTO, 1000, 1 << 20, str(tmp_path / "lib"))
    assert len(seen) >= 2 and not any(seen) and gc.isenabled() and len(results) >= 2
