"""GRID.yaml validation: every mistake is one SpecError naming the file and the key (exit 2)."""

from __future__ import annotations

import pytest

from te_ccl.errors import SpecError
from te_ccl.sweep.grid import load_grid
from te_ccl.sweep.points import expand_grid

BASE = "topologies: [ring8]\ncollectives: [allgather]\nsizes: [32KB, 1MB]\n"


@pytest.mark.parametrize(("text", "key", "words"), [
    (BASE + "chunk: 2\n", "chunk", "unknown key"),
    ("topologies: [ring8]\ncollectives: [allgather]\n", "sizes", "missing key"),
    (BASE + "chunks: [1, 0]\n", "chunks[1]", ">= 1"),
    (BASE + "chunks: [2, 2]\n", "chunks[1]", "listed twice"),
    (BASE + "chunks: []\n", "chunks", "at least one"),
    (BASE + "inplace: maybe\n", "inplace", "true or false"),
    (BASE + "backend: gurobi\n", "backend", "auto, milp, lp, rounds"),
    (BASE + "proto: LL256\n", "proto", "Simple, LL or LL128"),
    (BASE + "time_limit: -3s\n", "time_limit", "time"),
    (BASE + "epoch: soon\n", "epoch", "time"),
    ("topologies: [ring8]\ncollectives: [allgather]\nsizes: [1MB, 32KB]\n", "sizes[1]",
     "increasing"),
    ("topologies: [ring8]\ncollectives: [allgather]\nsizes: [32KB, {max: 1MB}]\n", "sizes",
     "either all sizes"),
    ("topologies: [ring8]\ncollectives: [allgather]\nsizes: [1 parsec]\n", "sizes[0]", "size"),
    ("topologies: [ring8]\ncollectives: [allgather]\n"
     "sizes: [{max: 1MB, at: 2MB}]\n", "sizes[0].at", "outside the range"),
    ("topologies: [ring8]\ncollectives: [allgather]\n"
     "sizes: [{min: 1MB}]\n", "sizes[0].at", "missing key"),
    ("topologies: [ring8]\ncollectives: [allgather]\n"
     "sizes: [{min: 1MB, max: 64KB, at: 1MB}]\n", "sizes[0].max", "more than min"),
    ("topologies: [ring8]\ncollectives: [allgather]\n"
     "sizes: [{max: 2MB, at: 1MB}, {min: 1MB, max: 4MB, at: 2MB}]\n", "sizes[1]", "overlaps sizes[0]"),
    ("topologies: [ring8]\ncollectives: [{collective: allgather, size: 1MB}]\nsizes: [1MB]\n",
     "collectives[0].size", "unknown key"),
])
def test_schema_errors_name_file_and_key(grid_file, text, key, words):
    path = grid_file(text)
    with pytest.raises(SpecError) as exc:
        load_grid(path)
    assert exc.value.file == str(path)
    assert exc.value.key == key
    assert words in exc.value.reason


@pytest.mark.parametrize(("text", "key", "words"), [
    ("topologies: [ring8, nosuch]\ncollectives: [allgather]\nsizes: [1MB]\n",
     "topologies[1]", "no shipped topology"),
    ("topologies: [ring8]\ncollectives: [allgather, {collective: broadcast, root: 9}]\n"
     "sizes: [1MB]\n", "collectives[1].root", "rank 9"),
    ("topologies: [ring8]\ncollectives: [allgaher]\nsizes: [1MB]\n", "collectives[0]",
     "allgather"),
    ("topologies: [ring8]\ncollectives: [allgather]\nsizes: [1000.5B]\n", "sizes[0]", ""),
    ("topologies: [ring8]\ncollectives: [allgather, {collective: AllGather}]\nsizes: [1MB]\n",
     "collectives[1]", "same collective as collectives[0]"),
])
def test_point_errors_are_found_before_any_solve(grid_file, text, key, words):
    path = grid_file(text)
    with pytest.raises(SpecError) as exc:
        expand_grid(load_grid(path))
    assert exc.value.file == str(path)
    assert exc.value.key == key
    assert words in exc.value.reason


def test_cli_exit_2_with_one_line_naming_file_and_key(grid_file, teccl, tmp_path):
    path = grid_file(BASE + "chunks: [1, 0]\n")
    code, out, err = teccl("sweep", str(path), "-o", str(tmp_path / "out"))
    assert code == 2
    assert out == ""
    assert err.strip().splitlines() == [f"teccl: error: {path}:4: chunks[1]: "
                                        "expected an integer >= 1, got 0"]
    assert not (tmp_path / "out").exists()


def test_relative_topology_paths_are_read_from_the_grid_directory(grid_file, tmp_path):
    (tmp_path / "pair.yaml").write_text(
        "gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 50GB/s, latency: 1us}\n")
    grid = load_grid(grid_file("topologies: [pair.yaml]\ncollectives: [allgather]\n"
                               "sizes: [1MB]\n"))
    (point,) = expand_grid(grid)
    assert point.topology.name == "pair"
    assert point.topology.ngpus == 2


def test_shipped_example_grid_expands():
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "sweep-small.yaml"
    points = expand_grid(load_grid(example))
    assert len(points) == 24
    assert {p.topology.name for p in points} == {"dgx1", "ring8"}


@pytest.mark.parametrize(("extra", "key"), [
    ("seed: 2147483648\n", "seed"),
    ("seed: -1\n", "seed"),
    ("time_limit: 1e30s\n", "time_limit"),
    ("time_limit: .inf\n", "time_limit"),
    ("time_limit: 1e30\n", "time_limit"),
])
def test_solver_values_no_point_could_use_are_refused_up_front(tmp_path, extra, key):
    path = tmp_path / "g.yaml"
    path.write_text("topologies: [ring8]\ncollectives: [allgather]\nsizes: [1MB]\n" + extra)
    with pytest.raises(SpecError) as exc:
        load_grid(str(path))
    assert exc.value.key == key and exc.value.file == str(path)
