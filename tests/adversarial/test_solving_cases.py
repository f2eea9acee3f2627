"""Valid input that once ended in an internal error, a wrong schedule or unbounded work:
each now compiles to a verified schedule or is refused with one line and exit 2 or 3."""

from __future__ import annotations

import json

import pytest

from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, compile_collective, solve
from te_ccl.deadline import until
from te_ccl.errors import SolverError, SpecError
from te_ccl.model.formulation import formulate
from te_ccl.model.problem import build_problem
from te_ccl.spec.topology import topology_from_data
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule

FAST = SolveParams(time_limit_s=5)


def _topology(links: list[dict], gpus: int, switches: list[dict] | None = None):
    return topology_from_data({"gpus": [f"g{i}" for i in range(gpus)],
                               "switches": switches or [],
                               "defaults": {"bandwidth": "50GB/s", "latency": "0.7us"},
                               "links": links}, "t.yaml")


def _one_way_ring(n: int):
    """A one-way ring with a few one-way chords of other bandwidths (no link has a reverse)."""
    links = [{"from": f"g{i}", "to": f"g{(i + 1) % n}"} for i in range(n)]
    links += [{"from": f"g{i}", "to": f"g{(i + 3) % n}", "bandwidth": "100GB/s"}
              for i in range(0, n, 4)]
    return _topology(links, n)


def _compiled(topology, collective, params=FAST, tmp_path=None):
    """Compile to MSCCL XML (verified by the pipeline) and re-verify the written file."""
    out = tmp_path / "out.xml"
    result = compile_collective(topology, collective, params, CompileOptions(output=str(out)))
    assert check_schedule(result.schedule) == []
    root = collective.ranks.index(collective.root) if collective.root is not None else None
    assert verify_msccl(out.read_text(), root=root).valid
    return result


@pytest.mark.parametrize("kind", ["reducescatter", "allreduce"])
@pytest.mark.parametrize("backend", ["auto", "scale"])
def test_reductions_on_one_way_links_run_on_the_real_links(kind, backend, tmp_path):
    topo = _one_way_ring(12)
    coll = Collective(CollectiveKind(kind), 12_000_000, tuple(range(12)))
    # the scale backend ends on its own (a second or so): a limit far above it does not
    # hang the outcome on the machine's speed; auto's search takes what limit it has
    limit = 600 if backend == "scale" else 10
    result = _compiled(topo, coll, SolveParams(backend=backend, time_limit_s=limit), tmp_path)
    assert all(topo.has_link(t.src, t.dst) for t in result.schedule.transfers)


def test_alltoall_on_an_irregular_topology_verifies(tmp_path):
    links = [{"from": "g0", "to": "g1", "bandwidth": "100GB/s", "latency": "0us"},
             {"from": "g1", "to": "g2", "latency": "2us"},
             {"from": "g2", "to": "g3", "bandwidth": "10GB/s"},
             {"from": "g3", "to": "g0", "bandwidth": "25GB/s", "latency": "0us"},
             {"between": ["g1", "g3"], "bandwidth": "25GB/s"},
             {"between": ["sw0", "g2"], "bandwidth": "100GB/s", "latency": "2us"},
             {"between": ["sw0", "g0"]}]
    topo = _topology(links, 4, [{"name": "sw0", "copy": True, "buffer": False}])
    for size in (7, 64_000_000):
        _compiled(topo, Collective(CollectiveKind.ALLTOALL, size, (0, 1, 2, 3)), FAST, tmp_path)


def test_rank_subset_routes_inside_the_ranks(tmp_path):
    # g0..g3 in a bidirectional ring with a shortcut g0-g2 through g4 (not a rank)
    links = [{"between": [f"g{i}", f"g{(i + 1) % 4}"], "bandwidth": "10GB/s"} for i in range(4)]
    links += [{"between": ["g0", "g4"], "bandwidth": "400GB/s"},
              {"between": ["g4", "g2"], "bandwidth": "400GB/s"}]
    topo = _topology(links, 5)
    result = _compiled(topo, Collective(CollectiveKind.ALLREDUCE, 4_000_000, (0, 1, 2, 3)),
                       FAST, tmp_path)
    assert "g4" not in {t.src for t in result.schedule.transfers}


def test_rank_subset_alltoall_routes_its_flows_inside_the_ranks(tmp_path):
    # the concurrent-flow LP of AlltoAll sees only the links among ranks 1-4 (g0 is out)
    links = [{"between": [f"g{i}", f"g{i % 4 + 1}"]} for i in range(1, 5)]
    links += [{"between": ["g0", "g1"], "bandwidth": "400GB/s"},
              {"between": ["g0", "g3"], "bandwidth": "400GB/s"}]
    topo = _topology(links, 5)
    result = _compiled(topo, Collective(CollectiveKind.ALLTOALL, 4_000_000, (1, 2, 3, 4)),
                       FAST, tmp_path)
    assert "g0" not in {t.src for t in result.schedule.transfers}


def test_rank_subset_needing_an_outside_relay_is_refused_up_front(teccl, tmp_path):
    code, _, err = teccl("compile", "ring8", "-c", "allgather", "-s", "1MB", "--ranks", "0,2",
                         "-o", str(tmp_path / "x.xml"))
    assert code == 2 and "cannot reach rank 2 without relaying" in err
    assert not (tmp_path / "x.xml").exists()


@pytest.mark.parametrize("args", [("dgx2", "-c", "allgather", "-s", "1KB"),
                                  ("dgx1", "-c", "allgather", "-s", "8B"),
                                  ("dgx1", "-c", "allreduce", "-s", "1B")])
def test_any_size_of_at_least_one_byte_compiles(teccl, tmp_path, args):
    """The rounds backend ends on its own (under a second of CPU each) where auto's search
    takes what limit it has (dgx2: minutes at 600 s), so the limit is far above the work
    and the outcome does not hang on the machine's speed."""
    out = tmp_path / "x.xml"
    code, stdout, err = teccl("compile", *args, "-o", str(out), "--json", "--backend",
                              "rounds", "--time-limit", "600")
    assert code == 0, err
    info = json.loads(stdout)
    assert info["size_bytes"] == {"1KB": 1000, "8B": 8, "1B": 1}[args[-1]]
    assert verify_msccl(out).valid
    coll = Collective(CollectiveKind(info["collective"]), info["size_bytes"],
                      tuple(range(info["ngpus"])))
    if coll.size_bytes % coll.nchunks:
        assert any("do not divide into" in n for n in info["notes"])


def test_uneven_sizes_are_timed_for_the_size_asked():
    c = Collective(CollectiveKind.ALLGATHER, 1000, tuple(range(16)))
    assert c.uneven and c.chunk_bytes == 62.5


@pytest.mark.slow
def test_size_libraries_over_tiny_and_wide_ranges(teccl, tmp_path):
    for span in ("1B..64B", "1B..1TB"):
        out = tmp_path / span.replace(".", "_")
        code, _, err = teccl("compile", "dgx1", "-c", "allgather", "--sizes", span, "-o",
                             str(out), "--time-limit", "10")  # 17 ranges, on a loaded runner too
        assert code == 0, err
        assert all(verify_msccl(p).valid for p in out.iterdir())


@pytest.mark.parametrize("size", ["8.000001B", "1.0000001MB", "1bit", "1e99999999999999"])
def test_fractional_or_absurd_sizes_are_refused(teccl, size):
    code, _, err = teccl("compile", "dgx1", "-c", "allgather", "-s", size, "-o", "-")
    assert code == 2 and "--size" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag, value", [("--time-limit", "inf"), ("--time-limit", "1e20"),
                                         ("--time-limit", "nan"), ("--seed", str(2**31)),
                                         ("--seed", "-1")])
def test_solver_arguments_out_of_range_are_refused(teccl, flag, value):
    code, _, err = teccl("compile", "dgx1", "-c", "allgather", "-s", "1MB", flag, value,
                         "-o", "-")
    assert code == 2 and flag.lstrip("-") in err


def test_tiny_epoch_is_refused_naming_the_cap(teccl):
    code, _, err = teccl("compile", "dgx1", "-c", "allgather", "-s", "1MB", "--epoch", "1ps",
                         "-o", "-")
    assert code == 2 and "at most 10000" in err


def test_huge_chunk_counts_are_refused_before_building(teccl):
    code, _, err = teccl("compile", "dgx1", "-c", "allgather", "-s", "1GB", "--chunks",
                         "100000", "-o", "-")
    assert code == 2 and "would build at least 5,600,000 transfers" in err
    # within the memory budget, but no rank's MSCCL program can take its chunks
    code, _, err = teccl("compile", "dgx1", "-c", "gather", "-s", "1GB", "--chunks",
                         "50000", "-o", "-")
    assert code == 3 and "no MSCCL algorithm of 50000 chunks per rank loads" in err


def test_huge_custom_demands_are_refused(teccl, tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("collective: custom\nsize: 1GB\ndemands:\n"
                    "  - {source: 0, destinations: '1-3', chunks: 100000000}\n")
    code, _, err = teccl("compile", "dgx1", str(spec), "-o", str(tmp_path / "c.json"))
    assert code == 2 and "demands: 100000000 chunks would build" in err


def test_a_compile_too_large_for_its_time_limit_stops_at_it_and_writes_nothing(teccl,
                                                                             tmp_path):
    """256 GPUs in one second: the compile names the stage the limit cut short."""
    out = tmp_path / "ag.xml"
    code, _, err = teccl("compile", "mesh16x16", "-c", "allgather", "-s", "1GB", "-o",
                         str(out), "--time-limit", "1")
    last = err.strip().splitlines()[-1]  # after any progress lines, one error line
    assert code == 3 and last.startswith("teccl: error: time limit")
    assert list(tmp_path.iterdir()) == []


def test_model_building_counts_against_the_time_limit():
    problem = build_problem(_one_way_ring(8), Collective(CollectiveKind.ALLGATHER, 8000,
                                                         tuple(range(8))))
    with until(0.0), pytest.raises(SolverError, match="while building the model"):
        formulate(problem, 40)


@pytest.mark.parametrize("backend", ["auto", "milp", "lp", "rounds"])
@pytest.mark.parametrize("kind, root", [("allgather", None), ("broadcast", 0),
                                        ("allreduce", None)])
def test_switch_that_stores_but_cannot_copy(kind, root, backend, tmp_path):
    topo = _topology([{"between": [f"g{i}", "sw"]} for i in range(3)], 3,
                     [{"name": "sw", "copy": False, "reduce": False, "buffer": True}])
    coll = Collective(CollectiveKind(kind), 3_000_000, (0, 1, 2), root=root)
    _compiled(topo, coll, SolveParams(backend=backend, time_limit_s=5), tmp_path)


def test_reduce_scatter_never_merges_partials_in_a_switch_that_cannot_reduce():
    # two GPUs behind one bufferless, non-reducing switch, and one direct link
    links = [{"between": ["g0", "sw"]}, {"between": ["g1", "sw"]}, {"between": ["sw", "g2"]},
             {"between": ["g0", "g1"], "bandwidth": "10GB/s"}]
    topo = _topology(links, 3, [{"name": "sw", "copy": True, "reduce": False,
                                 "buffer": False}])
    for backend in ("milp", "rounds", "lp"):
        s = solve(topo, Collective(CollectiveKind.REDUCESCATTER, 3_000_000, (0, 1, 2),
                                   chunks_per_rank=2), SolveParams(backend=backend,
                                                                   time_limit_s=5))
        assert check_schedule(s) == []


def test_one_byte_chunks_in_baselines(teccl, tmp_path):
    code, _, err = teccl("baseline", "ring-bidir", "dgx1", "-c", "allgather", "-s", "8B",
                         "-o", str(tmp_path / "b.xml"))
    assert code == 0, err
    assert verify_msccl(tmp_path / "b.xml").valid


def test_readme_custom_example(teccl, tmp_path):
    spec = tmp_path / "custom.yaml"
    spec.write_text("collective: custom\nsize: 4MB\nchunks: 4\ndemands:\n"
                    "  - {source: 0, destinations: \"1-3\", chunks: 2}\n"
                    "  - {source: g5, destinations: [6, 7]}\n")
    code, _, err = teccl("compile", "dgx1", str(spec), "-o", str(tmp_path / "c.json"),
                         "--time-limit", "10")
    assert code == 0, err
    code, _, err = teccl("compile", "dgx1", str(spec), "-o", str(tmp_path / "c.xml"),
                         "--time-limit", "10")
    assert code == 2 and "--format" in err and not (tmp_path / "c.xml").exists()


@pytest.mark.parametrize("chunks", ["2", "auto"])
def test_baseline_takes_chunks(teccl, tmp_path, chunks):
    code, stdout, err = teccl("baseline", "ring", "dgx1", "-c", "allgather", "-s", "1MB",
                              "--chunks", chunks, "-o", str(tmp_path / "b.xml"), "--json")
    assert code == 0, err
    info = json.loads(stdout)
    assert info["chunks_per_rank"] == 2 or chunks == "auto"
    assert verify_msccl(tmp_path / "b.xml").valid


def test_subset_check_is_a_spec_error_in_the_library():
    from te_ccl.spec.topology import load_topology

    with pytest.raises(SpecError, match="ranks"):
        solve(load_topology("ring8"), Collective(CollectiveKind.ALLGATHER, 1000, (0, 4)))


def test_in_switch_reduction_is_refused_for_msccl_before_any_file(tmp_path):
    # a switch that reduces but cannot copy: a Reduce could sum partials in it, which MSCCL
    # XML cannot express (the FRED switch tables can): the library refuses the XML as the
    # CLI does, naming the switch and the format to use, and writes nothing
    links = [{"between": [f"g{i}", f"g{(i + 1) % 4}"], "bandwidth": "10GB/s"} for i in range(4)]
    links += [{"from": f"g{i}", "to": "sw"} for i in (1, 2, 3)] + [{"from": "sw", "to": "g0"}]
    topo = _topology(links, 4, [{"name": "sw", "copy": False, "reduce": True, "buffer": False}])
    coll = Collective(CollectiveKind.REDUCE, 3_000_000, (0, 1, 2, 3), root=0)
    out = tmp_path / "out.xml"
    with pytest.raises(SpecError, match="switches sw reduce.*--format json"):
        compile_collective(topo, coll, SolveParams(backend="milp", time_limit_s=5),
                           CompileOptions(output=str(out)))
    assert not out.exists()
