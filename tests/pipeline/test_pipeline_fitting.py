"""What the MSCCL runtime cannot hold: the compile solves again with fewer sub-chunks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import te_ccl.compiler.pipeline as pipeline
import te_ccl.compiler.render as writing
from te_ccl.backends.scale import compile_scale, scale_plan
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, SolveParams, compile_collective, compile_size_library
from te_ccl.errors import RuntimeLimitError, SpecError
from te_ccl.schedule import Schedule
from te_ccl.spec.topology import load_topology
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule

MiB = 1 << 20
PARAMS = SolveParams(time_limit_s=120, threads=1)  # the whole compile, refits included
LONG = SolveParams(time_limit_s=600, threads=1)  # far above what it takes: the file, not the time


def a2a(n: int, size: int = 64 * MiB, inplace: bool = False) -> Collective:
    return Collective(CollectiveKind.ALLTOALL, size, tuple(range(n)), inplace=inplace)


@pytest.mark.parametrize("inplace", [False, True])
def test_dgx1_alltoall_at_64mib_compiles_to_a_file_the_runtime_loads(tmp_path: Path, inplace):
    """The scale plan cuts 100 sub-chunks per chunk here, more than 32 channels hold
    (long-held fused relays fill the FIFOs); in place even fewer fit (receives wait for
    the sends of the values they overwrite, so fewer thread blocks are nameable)."""
    dgx1, out = load_topology("dgx1"), tmp_path / "a.xml"
    result = compile_collective(dgx1, a2a(8, inplace=inplace), LONG,
                                CompileOptions(output=str(out)))
    s = result.schedule
    assert 1 < s.info.subchunks < 100
    assert s.collective.chunks_per_rank == s.info.subchunks
    assert any(n.startswith("msccl: solved again") for n in s.info.notes)
    assert check_schedule(s) == []
    assert verify_msccl(out.read_text()).valid
    assert s.finish_time_s <= 1.02 * result.lower_bound_s  # few sub-chunks lost, not quality


def _refusing(monkeypatch, calls: list[int]) -> None:
    """``render`` refuses every XML, as the runtime would a schedule too big for it."""
    def render(schedule: Schedule, options: CompileOptions, **_) -> bytes:
        if options.fmt == "json":
            return b"{}"
        calls.append(schedule.info.subchunks)
        raise RuntimeLimitError(f"refused {schedule.info.subchunks}")

    for module in (pipeline, writing):  # the first file, and the files refitted
        monkeypatch.setattr(module, "render", render)


def test_the_factor_halves_down_to_one_then_the_limit_is_reported(tmp_path, monkeypatch):
    """Then ``auto`` races the chunking again with whole chunks, whose file is refused too."""
    calls: list[int] = []
    _refusing(monkeypatch, calls)
    out = tmp_path / "a.xml"
    with pytest.raises(RuntimeLimitError, match="even with 1 sub-chunk"):
        compile_collective(load_topology("dgx1"), a2a(8), PARAMS,
                           CompileOptions(output=str(out)))
    first = next(i for i, k in enumerate(calls) if k > 1)  # the first file's candidates
    assert first >= 1 and set(calls[:first]) == {1}
    halving, raced = calls[first:-1], calls[-1]
    assert halving[0] > 1 and halving[-1] == 1 and raced == 1
    assert all(b <= a // 2 for a, b in zip(halving, halving[1:], strict=False))
    assert not out.exists()


def test_where_no_sub_chunking_of_the_scale_schedule_fits_auto_writes_another(tmp_path,
                                                                             monkeypatch):
    """The runtime holding the scale schedule at no sub-chunking, the chunking is raced
    again with whole chunks: a file of another candidate is written, not an error."""
    import te_ccl.lower.msccl as lowering

    real = lowering.lower_to_msccl

    def lower(schedule: Schedule, **options) -> bytes:
        if schedule.info.backend == "scale":
            raise RuntimeLimitError(f"refused {schedule.info.subchunks}")
        return real(schedule, **options)

    monkeypatch.setattr(lowering, "lower_to_msccl", lower)
    # the first file (a ring) stands, not a nearer cheap candidate: the search's own
    # schedule, the scale one, is the one to write
    monkeypatch.setattr(pipeline, "FIRST_FILE_GAP", float("inf"))
    out = tmp_path / "a.xml"
    s = compile_collective(load_topology("dgx1"), a2a(8), PARAMS,
                           CompileOptions(output=str(out))).schedule
    assert s.info.backend != "scale" and s.info.subchunks == 1
    assert any("raced again with whole chunks" in n for n in s.info.notes)
    assert verify_msccl(out.read_text()).valid


def test_a_size_library_falls_back_the_same_way_and_leaves_no_file(tmp_path, monkeypatch):
    calls: list[int] = []
    _refusing(monkeypatch, calls)
    with pytest.raises(RuntimeLimitError):
        compile_size_library(load_topology("dgx1"), a2a(8), PARAMS, 16 * MiB, 64 * MiB,
                             str(tmp_path))
    assert calls[-1] == 1 and list(tmp_path.iterdir()) == []


def test_the_search_keeps_the_most_sub_chunks_that_fit(monkeypatch, tmp_path):
    """Halving finds a fit, bisection then closes in on the largest within a quarter."""
    real, limit = pipeline.render, 30
    tried: list[int] = []

    def render(schedule: Schedule, options: CompileOptions, **_) -> bytes:
        tried.append(schedule.info.subchunks)
        if schedule.info.subchunks > limit:
            raise RuntimeLimitError("too many")
        return real(schedule, options, **_)

    for module in (pipeline, writing):  # the first file, and the files refitted
        monkeypatch.setattr(module, "render", render)
    result = compile_collective(load_topology("dgx1"), a2a(8, size=1 << 30), PARAMS,
                                CompileOptions(output=str(tmp_path / "a.xml")))
    k = result.schedule.info.subchunks
    first, tried = tried[0], tried[1:]  # the first file, of one sub-chunk per chunk
    assert first == 1 and tried[0] > limit >= k > 3 * limit // 4
    assert len(tried) <= 6


def test_scale_plan_honours_the_cap_and_the_schedule_records_the_factor():
    dgx1 = load_topology("dgx1")
    _, _, k = scale_plan(dgx1, a2a(8))
    _, _, capped = scale_plan(dgx1, a2a(8), 7)
    assert k > 7 and capped == 7
    s = compile_scale(dgx1, a2a(8), replace(PARAMS, max_subchunks=7))
    assert s.info.subchunks == 7 and s.collective.chunks_per_rank == 7
    back = Schedule.from_json(s.to_json(), dgx1)
    assert back.info.subchunks == 7


def test_max_subchunks_below_one_is_bad_input():
    with pytest.raises(SpecError, match="max-subchunks"):
        SolveParams(max_subchunks=0)


@pytest.mark.slow
def test_a_sub_chunked_schedule_is_solved_again_rather_than_lose_its_timing(tmp_path):
    """ndv2x2 AllReduce 1 GB: at the scale plan's sub-chunking two ranks need more elements
    than the reader holds unless their links give up the schedule's order (that file
    replayed 9% slower than its schedule); solved again with fewer sub-chunks, the file
    keeps the schedule's timing."""
    out = tmp_path / "a.xml"
    coll = Collective(CollectiveKind.ALLREDUCE, 10**9, tuple(range(16)))
    result = compile_collective(load_topology("ndv2x2"), coll, replace(PARAMS, backend="scale"),
                                CompileOptions(output=str(out)))
    notes = result.schedule.info.notes
    assert any(n.startswith("msccl: solved again") for n in notes)
    assert not any("serve sends in the order" in n for n in notes)
    assert verify_msccl(out.read_text()).valid
    timing = result.timing
    assert timing is not None and timing.xml_s is not None and timing.schedule_s is not None
    assert timing.xml_s <= 1.01 * timing.schedule_s


def test_an_alltoall_over_one_switch_of_72_gpus_lowers_untimed_with_a_block_per_peer():
    """71 peers each way: counting sending thread blocks as waited for (128 ids a GPU)
    fits none; untimed, the lowering counts only receiving ones, and the file verifies."""
    from te_ccl.baselines import build_baseline
    from te_ccl.compiler import forward_only
    from te_ccl.lower.msccl import lower_to_msccl

    topo = forward_only(load_topology("gb200-nvl72"))
    xml = lower_to_msccl(build_baseline("direct", topo, a2a(72, MiB)))
    assert verify_msccl(xml.decode()).valid


def test_solved_again_keeps_what_the_search_raced_against():
    """The one re-solve of a scale schedule that cannot be written (render's refit and the
    anytime compile's): the chunking given, at most the sub-chunks given, the race's notes."""
    from te_ccl.compiler import Timer
    from te_ccl.compiler.render import solved_again

    dgx1, coll = load_topology("dgx1"), a2a(8)
    s = compile_scale(dgx1, coll, replace(PARAMS, max_subchunks=7))
    s = s.with_info(notes=("auto: raced", "not the race's"))
    again = solved_again(s, coll, 2, PARAMS, None, Timer())
    assert again.info.backend == "scale" and again.info.subchunks <= 2
    assert again.collective.chunks_per_rank == again.info.subchunks
    assert again.info.notes[0] == "auto: raced" and "not the race's" not in again.info.notes
