"""load_collective: file and flags, every kind, and every bad input."""

from __future__ import annotations

import pytest

from te_ccl.collective.model import CollectiveKind
from te_ccl.errors import SpecError
from te_ccl.spec.collective import load_collective, parse_ranks
from te_ccl.spec.topology import load_topology


@pytest.fixture(scope="module")
def dgx1():
    return load_topology("dgx1")


def spec(tmp_path, text: str) -> str:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    return str(f)


@pytest.mark.parametrize("kind", [k.value for k in CollectiveKind if k.value != "custom"])
def test_every_kind_from_flags(dgx1, kind):
    root = 3 if kind in ("broadcast", "reduce", "gather", "scatter") else None
    c = load_collective(dgx1, None, collective=kind, size="64KiB", root=root, chunks=2)
    assert c.kind.value == kind and c.size_bytes == 65536 and c.chunks_per_rank == 2
    assert c.root == root and c.ranks == tuple(range(8))
    assert len(c.chunks()) >= 1


def test_file_with_everything_and_flag_overrides(dgx1, tmp_path):
    path = spec(tmp_path, """
collective: AllGather
size: 1MiB
chunks: 2
ranks: [0, 1, "2-3"]
inplace: true
proto: ll128
description: four ranks
""")
    c = load_collective(dgx1, path)
    assert (c.kind, c.size_bytes, c.ranks, c.inplace, c.proto) == (
        CollectiveKind.ALLGATHER, 2**20, (0, 1, 2, 3), True, "LL128")
    c2 = load_collective(dgx1, path, size="2MiB", ranks="4-7", inplace=False, proto=None)
    assert (c2.size_bytes, c2.ranks, c2.inplace, c2.proto) == (2 * 2**20, (4, 5, 6, 7), False,
                                                               "LL128")


def test_custom_demands(dgx1, tmp_path):
    c = load_collective(dgx1, spec(tmp_path, """
collective: custom
size: 4KB
chunks: 2
demands:
  - {source: 0, destinations: "1-3", chunks: 2}
  - {source: g5, destinations: [g6, 7]}
"""))
    assert [(d.source, d.destinations, d.chunks) for d in c.demands] == [
        (0, (1, 2, 3), 2), (5, (6, 7), 1)]
    assert len(c.chunks()) == 3


def test_parse_ranks_forms(dgx1):
    assert parse_ranks(dgx1, "all") == tuple(range(8))
    assert parse_ranks(dgx1, 3) == (3,)
    assert parse_ranks(dgx1, "6-7, 0") == (6, 7, 0)
    assert parse_ranks(dgx1, ["g1", "2"]) == (1, 2)


BAD_FILES = {
    "unknown key": ("collective: allgather\nsize: 1MB\nrootz: 0\n", "c.yaml:3: rootz: unknown key"),
    "missing key": ("collective: allgather\n", "c.yaml:1: size: missing key"),
    "wrong type": ("collective: allgather\nsize: 1MB\nchunks: [1]\n",
                   "c.yaml:3: chunks: expected an integer, got a list"),
    "bad unit": ("collective: allgather\nsize: 1 furlong\n", "c.yaml:2: size: expected a size"),
    "bad kind": ("collective: allsort\nsize: 1MB\n", "collective: expected one of"),
    "rank not in topology": ("collective: allgather\nsize: 1MB\nranks: [0, 8]\n",
                             "c.yaml:3: ranks: rank 8 is not in the topology (ranks 0-7)"),
    "rank range out": ("collective: allgather\nsize: 1MB\nranks: 4-9\n", "rank 9 is not in"),
    "huge range": ("collective: allgather\nsize: 1MB\nranks: 0-99999999999\n",
                   "rank 99999999999 is not in"),
    "rank twice": ("collective: allgather\nsize: 1MB\nranks: [1, 1]\n", "rank 1 is listed twice"),
    "unknown gpu name": ("collective: allgather\nsize: 1MB\nranks: [nosuch]\n",
                       "expected a rank, a GPU name or a range"),
    "root outside ranks": ("collective: broadcast\nsize: 1MB\nranks: 0-3\nroot: 5\n",
                           "c.yaml:4: root: root 5 is not one of the ranks [0, 1, 2, 3]"),
    "root not taken": ("collective: allreduce\nsize: 1MB\nroot: 0\n", "allreduce has no root"),
    "fractional bytes": ("collective: allgather\nsize: 1.5B\nchunks: 3\n",
                         "size: expected a whole number of bytes"),
    "zero chunks": ("collective: allgather\nsize: 1MB\nchunks: 0\n", "expected an integer >= 1"),
    "bad proto": ("collective: allgather\nsize: 1MB\nproto: Fast\n",
                  "proto: expected Simple, LL or LL128"),
    "one rank": ("collective: allgather\nsize: 1MB\nranks: [2]\n", "at least 2 ranks"),
    "demands on allgather": ("collective: allgather\nsize: 1MB\ndemands: []\n",
                             "only a custom collective takes demands"),
    "custom without demands": ("collective: custom\nsize: 1MB\n", "custom collective needs demands"),
    "demand to itself": ("collective: custom\nsize: 1MB\ndemands: [{source: 1, destinations: [1]}]\n",
                         "demands[0].destinations: expected at least one rank other"),
    "demand outside ranks": ("collective: custom\nsize: 1MB\nranks: 0-3\n"
                             "demands: [{source: 0, destinations: [6]}]\n",
                             "rank 6 is not one of the collective's ranks"),
    "empty": ("", "c.yaml: file is empty"),
    "syntax": ("collective: allgather\nsize: [1MB\n", "c.yaml:3: YAML syntax error"),
    "not a mapping": ("allgather\n", "expected a collective mapping"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_collective_files(dgx1, tmp_path, case):
    text, fragment = BAD_FILES[case]
    with pytest.raises(SpecError) as exc:
        load_collective(dgx1, spec(tmp_path, text))
    assert exc.value.exit_code == 2
    assert fragment in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("flags, fragment", [
    ({"collective": "allgather"}, "--size: missing"),
    ({"size": "1MB"}, "--collective: missing"),
    ({"collective": "allgather", "size": "1MB", "ranks": "0-12"}, "--ranks: rank 12 is not in"),
    ({"collective": "broadcast", "size": "1MB", "ranks": "0-3", "root": 6},
     "--root: root 6 is not one of the ranks"),
    ({"collective": "allgather", "size": "1.0000001MB"},
     "--size: expected a whole number of bytes, got '1.0000001MB' (1000000.1 bytes)"),
    ({"collective": "allgather", "size": "-1MB"}, "--size: expected a positive size"),
])
def test_bad_flags(dgx1, flags, fragment):
    with pytest.raises(SpecError) as exc:
        load_collective(dgx1, None, **flags)
    assert fragment in str(exc.value)


def test_switch_is_not_a_rank():
    with pytest.raises(SpecError, match="'sw' is a switch, not a GPU"):
        load_collective(load_topology("ndv2x4"), None, collective="allgather", size="1MB",
                        ranks=["sw"])


def test_flag_fixes_a_bad_file_value(dgx1, tmp_path):
    path = spec(tmp_path, "collective: allgather\nsize: 1000\nchunks: 3\n")
    assert load_collective(dgx1, path, chunks=1).chunk_bytes == 125


def test_unknown_flag_is_a_programming_error(dgx1):
    with pytest.raises(TypeError):
        load_collective(dgx1, None, colective="allgather")


@pytest.mark.parametrize("kind", ["broadcast", "reduce", "gather", "scatter"])
def test_rooted_collectives_default_to_the_first_rank(kind):
    topo = load_topology("dgx1")
    assert load_collective(topo, None, collective=kind, size="1MB").root == 0
    assert load_collective(topo, None, collective=kind, size="1MB", ranks="2-5").root == 2
    assert load_collective(topo, None, collective=kind, size="1MB", root="3").root == 3


def test_a_size_the_chunks_do_not_divide_loads_with_the_mean_chunk(dgx1):
    c = load_collective(dgx1, None, collective="allgather", size="1000", chunks=3)
    assert c.uneven and c.chunk_bytes == pytest.approx(1000 / 24)
