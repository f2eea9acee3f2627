"""A compile estimates what it would build before building it and refuses what one
cannot hold (exit 2, naming the input and the estimate); a link of absurd latency
neither blows up the epochs nor the time grid; running out of memory anyway is exit 3.

The end-to-end cases run `teccl` in a child process under a 4 GB address-space limit:
a regression shows as a refusal turned into a MemoryError (exit 3) or worse, never as a
host that swaps. Sizes are asserted by counts (transfers, epochs, rounds), never by time.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale.greedy import net_of
from te_ccl.backends.scale.plan import scale_plan
from te_ccl.cli.main import Failure
from te_ccl.collective.model import Collective, CollectiveKind, CustomDemand
from te_ccl.compiler import chunk_candidates, solve
from te_ccl.errors import SpecError
from te_ccl.model.footprint import (
    MAX_GPUS,
    MAX_TRANSFERS,
    check_fits,
    deliveries,
    most_chunks,
    transfers_at_least,
)
from te_ccl.model.outliers import serial_finish, without_slow_links
from te_ccl.model.problem import build_problem
from te_ccl.spec.topology import load_topology, shipped_topologies, topology_from_data
from te_ccl.topology.generators import fully_connected, mesh

GUARD_BYTES = 4 << 30  # the child's address space: far below what a blow-up reaches
HANG_S = 300  # only a guard against a hang: no assertion is on time
ROOTED = ("broadcast", "reduce", "gather", "scatter")


def _teccl(*args: str, tmp_path) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (GUARD_BYTES, GUARD_BYTES))

    return subprocess.run([sys.executable, "-m", "te_ccl", "-q", *args], capture_output=True,
                          text=True, timeout=HANG_S, cwd=tmp_path, preexec_fn=limit)


def _collective(kind: str, n: int, k: int, ranks: tuple[int, ...] | None = None) -> Collective:
    ranks = ranks or tuple(range(n))
    root = ranks[-1] if kind in ROOTED else None
    demands = ((CustomDemand(ranks[0], ranks, 2), CustomDemand(ranks[-1], ranks[:1], 1))
               if kind == "custom" else ())
    return Collective(CollectiveKind(kind), 1 << 20, ranks, chunks_per_rank=k, root=root,
                      demands=demands)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from([k.value for k in CollectiveKind]), n=st.integers(1, 9),
       k=st.integers(1, 5), stride=st.integers(1, 3))
def test_counts_without_the_chunks_are_the_chunks_counts(kind, n, k, stride):
    """What the checks count by arithmetic is what the chunks would give: the chunks a
    rank receives (the loadability check) and the deliveries (the transfer estimate)."""
    c = _collective(kind, n, k, tuple(range(0, n * stride, stride)))
    chunks = list(c.iter_chunks())
    assert c.received() == dict(Counter(d for ch in chunks for d in ch.destinations))
    moves = sum(len(set(ch.destinations) - set(ch.sources)) if not ch.reduce
                else len(set(ch.sources) - {ch.destinations[0]}) for ch in chunks)
    if c.kind is CollectiveKind.ALLREDUCE:  # the sums go back out to every other rank
        moves += sum(len(ch.destinations) - 1 for ch in chunks)
    assert deliveries(c) == moves


def test_the_loadability_check_builds_no_chunk(monkeypatch):
    from te_ccl.compiler.fits import check_loadable
    from te_ccl.errors import RuntimeLimitError

    def refuse(self):
        raise AssertionError("chunks expanded")

    monkeypatch.setattr(Collective, "iter_chunks", refuse)
    with pytest.raises(RuntimeLimitError, match="rank 0 receives 800000 chunks"):
        check_loadable(_collective("alltoall", 8, 100_000))


def test_a_chunking_beyond_the_budget_is_refused_naming_what_fits():
    topo = fully_connected(8, 50e9)
    coll = _collective("alltoall", 8, 100_000)
    with pytest.raises(SpecError) as e:
        check_fits(topo, coll)
    assert e.value.key == "chunks"
    most = most_chunks(topo, coll)
    assert f"at most {most} chunks per rank" in str(e.value)
    assert f"{transfers_at_least(topo, coll):,} transfers" in str(e.value)
    check_fits(topo, replace(coll, chunks_per_rank=most))  # the advice holds
    with pytest.raises(SpecError):
        check_fits(topo, replace(coll, chunks_per_rank=most + 1))


def test_too_many_gpus_are_refused_by_count():
    with pytest.raises(SpecError, match=f"more than the {MAX_GPUS}") as e:
        check_fits(mesh([65, 64], 50e9), _collective("broadcast", 65 * 64, 1))
    assert e.value.key == "topology"
    check_fits(mesh([64, 64], 50e9), _collective("broadcast", 64 * 64, 1))


@pytest.mark.parametrize("name", [n for n in shipped_topologies()
                                  if load_topology(n).ngpus <= 1024])
def test_every_shipped_topology_compiles_every_collective_at_one_chunk(name):
    """The budget takes every collective of the shipped topologies at one chunk per rank
    but the AlltoAll of 1024 GPUs, routed over a mesh or torus: 17–27 million hops, held
    on a 2D grid only, where the row AlltoAll keeps them as array rows."""
    from te_ccl.model.footprint import by_rows

    topo = load_topology(name)
    for kind in ("allgather", "reducescatter", "allreduce", "broadcast", "gather"):
        check_fits(topo, _collective(kind, topo.ngpus, 1))
    alltoall = _collective("alltoall", topo.ngpus, 1)
    if topo.ngpus < 1024 or by_rows(topo, alltoall):
        check_fits(topo, alltoall)
    else:
        with pytest.raises(SpecError, match="use fewer ranks"):
            check_fits(topo, alltoall)


def test_chunkings_and_sub_chunks_stay_within_the_budget():
    topo = load_topology("mesh32x32")
    coll = _collective("allgather", 1024, 1)
    most = most_chunks(topo, coll)
    assert max(chunk_candidates(topo, coll)) <= most < 8
    sub, _, k = scale_plan(topo, coll)
    assert transfers_at_least(topo, sub) <= MAX_TRANSFERS


def _ring(latency: str):
    """Three GPUs in a ring, one of whose links (both ways) has ``latency``."""
    return topology_from_data({
        "gpus": ["g0", "g1", "g2"], "defaults": {"bandwidth": "50GB/s", "latency": "0.7us"},
        "links": [{"between": ["g0", "g1"]}, {"between": ["g1", "g2"]},
                  {"between": ["g2", "g0"], "latency": latency}]}, "t.yaml")


def test_a_link_slower_than_a_whole_schedule_is_left_out():
    topo, coll = _ring("1000000s"), _collective("allgather", 3, 1)
    kept, note = without_slow_links(topo, coll)
    assert {k.key for k in topo.links} - {k.key for k in kept.links} == {("g2", "g0"),
                                                                         ("g0", "g2")}
    assert note.startswith("left out 2 links")
    assert serial_finish(kept, coll) == serial_finish(topo, coll) < 1e-3


@pytest.mark.parametrize("name", ["dgx1", "ndv2x2", "hgx-h100x2", "mesh4x4"])
def test_no_shipped_link_is_left_out(name):
    topo = load_topology(name)
    for size in (1, 1 << 20):
        coll = replace(_collective("allgather", topo.ngpus, 1), size_bytes=size * topo.ngpus)
        assert without_slow_links(topo, coll) == (topo, None)


def test_a_long_epoch_gives_no_link_more_starts_than_there_are_chunks():
    """A slow link sets a long epoch (``slowest``): the fast links could start millions
    of chunks in one, the greedy's rounds (a start of each in-link of a GPU each) stay
    within the chunks there are."""
    problem = build_problem(_ring("10s"), _collective("allgather", 3, 4), "slowest")
    assert max(lt.capacity for lt in problem.timings.values()) > 10**6
    indegree = max(Counter(v for _, v in problem.timings).values())
    assert len(net_of(problem).rounds) <= indegree * len(problem.demands)


@pytest.mark.parametrize("backend", ["auto", "scale", "milp"])
def test_a_huge_latency_is_solved_in_few_epochs_without_the_link(backend):
    topo = _ring("1000000s")
    s = solve(topo, _collective("allgather", 3, 1), SolveParams(backend=backend,
                                                                time_limit_s=20))
    assert s.topology is topo
    assert not {(t.src, t.dst) for t in s.transfers} & {("g2", "g0"), ("g0", "g2")}
    assert s.finish_epoch < 1000 and s.finish_time_s < 1e-3  # not 10⁴ epochs a hop
    assert any(n.startswith("left out 2 links") for n in s.info.notes)


def test_a_huge_latency_compiles_within_bounds(tmp_path):
    (tmp_path / "far.yaml").write_text(
        "name: far\ngpus: [g0, g1, g2]\ndefaults: {bandwidth: 50GB/s, latency: 0.7us}\n"
        "links:\n  - {between: [g0, g1]}\n  - {between: [g1, g2]}\n"
        "  - {between: [g2, g0], latency: 1000000s}\n")
    run = _teccl("compile", "far.yaml", "-c", "allgather", "-s", "1MB", "--time-limit", "10",
                 "-o", "far.xml", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "far.xml").exists()


def test_too_many_chunks_on_8_gpus_are_refused_before_any_work(tmp_path):
    run = _teccl("compile", "dgx1", "-c", "alltoall", "-s", "1GB", "--chunks", "100000",
                 "--time-limit", "2", "-o", "a.xml", tmp_path=tmp_path)
    assert run.returncode == 2, run.stderr
    line, = run.stderr.splitlines()
    assert line.startswith("teccl: error: chunks: 100000 chunks per rank would build at least")
    assert not list(tmp_path.iterdir())


def test_a_10000_gpu_mesh_is_refused_by_its_size(tmp_path):
    (tmp_path / "big.yaml").write_text(
        "name: mesh100x100\ngenerator: {kind: mesh, dims: [100, 100], bandwidth: 50GB/s}\n")
    run = _teccl("compile", "big.yaml", "-c", "allgather", "-s", "1MB", "--time-limit", "10",
                 "-o", "m.xml", tmp_path=tmp_path)
    assert run.returncode == 2, run.stderr
    line, = run.stderr.splitlines()
    assert "mesh100x100 has 10000 GPUs, more than the 4096 a compile takes" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]


def test_running_out_of_memory_is_exit_3_not_an_internal_error():
    def deep() -> None:
        raise MemoryError

    try:
        deep()
    except MemoryError as e:
        failure = Failure.of(e, debug=False)
    assert failure.code == 3 and failure.message.startswith("out of memory in ")


def test_an_alltoall_whose_hops_overflow_every_rank_is_refused_before_solving():
    """torus 8×8×16: the AlltoAll's chunks cross 8 links on average, 8 steps per chunk a
    rank receives; the reader holds ~3 per chunk (a 2D grid's rows fit). Refused by
    arithmetic, exit 3, no file."""
    from te_ccl.compiler.fits import check_loadable
    from te_ccl.errors import RuntimeLimitError
    from te_ccl.topology.generators import torus

    c = Collective(CollectiveKind.ALLTOALL, 1 << 20, tuple(range(1024)))
    with pytest.raises(RuntimeLimitError, match="steps the runtime's reader holds per rank"):
        check_loadable(c, torus([8, 8, 16], 50e9))
    check_loadable(replace(c, ranks=tuple(range(256))), torus([16, 16], 50e9))  # 8 hops: fits
