"""The artifact is the judge: candidates that do not lower lose, switches only forward in
MSCCL output, rooted algorithms say what the executor does with them."""

from __future__ import annotations

from collections import Counter

import pytest

import te_ccl.lower.msccl as lowering
from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import (
    BASE_CHUNKS,
    CompileOptions,
    Timer,
    compile_collective,
    compile_size_library,
    forward_only,
    solve_best,
    summary,
)
from te_ccl.errors import SpecError
from te_ccl.lower.msccl.channels import ChannelsExhausted
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.topology import Link, Node, Topology
from te_ccl.topology.model import NodeKind

MILP = SolveParams(backend="milp", time_limit_s=10, threads=1)
AUTO = SolveParams(time_limit_s=10, threads=1)


def ring4() -> Topology:
    links = [Link(f"g{i}", f"g{(i + d) % 4}", 1e9) for i in range(4) for d in (1, 3)]
    return Topology.build("ring4", [Node(f"g{i}") for i in range(4)], links)


def star(copy: bool = True) -> Topology:
    """Four GPUs on one switch that can copy (dgx2's kind of NVSwitch, shrunk)."""
    nodes = [Node(f"g{i}") for i in range(4)] + [Node("sw", NodeKind.SWITCH, can_copy=copy)]
    links = [x for i in range(4) for x in (Link(f"g{i}", "sw", 1e9, 1e-6),
                                           Link("sw", f"g{i}", 1e9, 1e-6))]
    return Topology.build("star4", nodes, links)


def refusing(monkeypatch, refuse) -> None:
    """Make the lowering refuse the schedules ``refuse`` picks, as the runtime's limits do."""
    real = lowering.lower_to_msccl

    def lower(schedule, **kw):
        if refuse(schedule):
            raise ChannelsExhausted("an edge fits on none of the 32 channels")
        return real(schedule, **kw)

    monkeypatch.setattr(lowering, "lower_to_msccl", lower)


def test_auto_chunks_falls_back_to_a_chunking_that_lowers(monkeypatch, tmp_path):
    """ring4 AllGather picks 2 chunks per rank; when 2 does not lower, auto keeps the
    next best that does and the compile writes it."""
    refusing(monkeypatch, lambda s: s.collective.chunks_per_rank == 2)
    c = Collective(CollectiveKind.ALLGATHER, 4 << 20, tuple(range(4)))
    out = tmp_path / "ag.xml"
    result = compile_collective(ring4(), c, MILP, CompileOptions(output=str(out),
                                                                 chunk_choices=BASE_CHUNKS))
    assert result.schedule.collective.chunks_per_rank != 2
    assert "2: does not lower" in next(n for n in result.schedule.info.notes
                                       if n.startswith("chunks auto"))
    info = summary(result, ring4())
    assert info["finish_time_s"] == simulate_msccl(out, ring4(), 4 << 20).finish_time_s


def test_auto_keeps_a_template_when_the_flow_schedule_does_not_lower(monkeypatch, tmp_path):
    import te_ccl.backends.scale as scale
    import te_ccl.compiler.pipeline as pipeline

    monkeypatch.setattr(scale, "scale_method", lambda *a: None)  # the flow model and templates
    # the ring's first file is 2x the bound here: the search, not the first file's next
    # candidate, is what finds the better template
    monkeypatch.setattr(pipeline, "FIRST_FILE_GAP", float("inf"))
    refusing(monkeypatch, lambda s: not s.info.backend.startswith("baseline"))
    c = Collective(CollectiveKind.ALLGATHER, 4 << 20, tuple(range(4)))
    result = compile_collective(ring4(), c, AUTO, CompileOptions(output=str(tmp_path / "a.xml")))
    assert result.schedule.info.backend.startswith("baseline:")
    assert result.timing.xml_s is not None
    kept = [n for n in result.schedule.info.notes if n.startswith("auto: kept the template ")]
    assert len(kept) == 1 and "flow model: does not lower" in kept[0], result.schedule.info.notes


def test_timer_judges_an_unlowerable_schedule_infinitely_slow(monkeypatch):
    refusing(monkeypatch, lambda s: True)
    c = Collective(CollectiveKind.ALLGATHER, 4 << 20, tuple(range(4)))
    s = solve_best(ring4(), c, MILP, judge=Timer(xml=False).judge)
    timer = Timer()
    assert timer.judge(s) == float("inf")
    timing = timer.timing(s)
    assert "32 channels" in timing.unlowerable and timing.measured_by == "schedule replay"


def _copies(schedule) -> int:
    """Chunk sends out of switches beyond the chunks they received (in-switch copies)."""
    topo = schedule.topology
    ins = Counter((t.dst, t.chunk) for t in schedule.transfers if not topo.node(t.dst).is_gpu)
    outs = Counter((t.src, t.chunk) for t in schedule.transfers if not topo.node(t.src).is_gpu)
    return sum(max(0, n - ins[key]) for key, n in outs.items())


def test_msccl_output_does_not_rely_on_in_switch_copies(tmp_path):
    """A copying switch may multicast a broadcast; an MSCCL send goes to one peer, so the
    XML compile solves with a forwarding switch, and its time is the XML's."""
    topo = star(copy=True)
    c = Collective(CollectiveKind.BROADCAST, 4 << 20, tuple(range(4)), chunks_per_rank=2,
                   root=0)
    assert _copies(solve_best(topo, c, MILP, in_switch=True)) > 0  # copying pays here
    out = tmp_path / "b.xml"
    result = compile_collective(topo, c, MILP, CompileOptions(output=str(out)))
    assert _copies(result.schedule) == 0
    assert not result.schedule.topology.node("sw").can_copy
    assert any("switches only forward" in n for n in result.schedule.info.notes)
    assert result.timing.xml_s == simulate_msccl(out, topo, 4 << 20).finish_time_s
    assert forward_only(star(copy=False)) == star(copy=False)


def test_the_usable_machine_says_whether_a_switch_was_made_to_forward():
    from te_ccl.compiler.best import Usable

    copying, forwarding = Usable.of(star(copy=True), False), Usable.of(star(copy=False), False)
    assert copying.forwarded and not copying.topology.node("sw").can_copy
    assert not forwarding.forwarded and forwarding.topology == star(copy=False)
    kept = Usable.of(star(copy=True), True)  # the output drives the switch: as it is
    assert not kept.forwarded and kept.topology.node("sw").can_copy


def test_rooted_compiles_say_what_the_executor_does_with_them():
    ring8 = load_topology("ring8")
    notes = {}
    for kind in ("broadcast", "gather"):
        c = Collective(CollectiveKind(kind), 8 << 10, tuple(range(8)), root=0)
        notes[kind] = compile_collective(ring8, c, AUTO).schedule.info.notes
    assert any("not by root" in n and "root-0 broadcast" in n for n in notes["broadcast"])
    assert any("no NCCL entry point for gather" in n for n in notes["gather"])
    c = Collective(CollectiveKind.ALLGATHER, 8 << 10, tuple(range(8)))
    assert not any("root" in n for n in compile_collective(ring8, c, AUTO).schedule.info.notes)


def test_size_library_refuses_rooted_collectives(tmp_path):
    c = Collective(CollectiveKind.BROADCAST, 1 << 20, tuple(range(8)), root=0)
    with pytest.raises(SpecError, match="every root") as e:
        compile_size_library(load_topology("ring8"), c, AUTO, 1000, 1 << 20, str(tmp_path / "l"))
    assert e.value.key == "--sizes" and not (tmp_path / "l").exists()


def test_sub_chunks_over_a_runtime_limit_are_solved_again_not_dropped(monkeypatch):
    """A scale schedule whose sub-chunks overflow the channels stands at its schedule
    replay while judged (render_fitting solves it again with fewer), where a schedule
    without sub-chunks that does not lower is infinitely slow."""
    from dataclasses import replace

    refusing(monkeypatch, lambda s: True)
    c = Collective(CollectiveKind.ALLGATHER, 4 << 20, tuple(range(4)))
    s = solve_best(ring4(), c, MILP, judge=Timer(xml=False).judge)
    cut = replace(s, info=replace(s.info, subchunks=4))
    timer = Timer()
    assert timer.timing(cut).refittable and timer.judge(cut) == timer.timing(cut).schedule_s
    assert not timer.timing(s).refittable
