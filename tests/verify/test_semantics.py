"""Small hand-written algorithms for every collective, in-place and out-of-place.

Each valid program is checked to pass, and a one-line change of it to fail with the
expected rule, so the buffer definitions in ``layout`` are pinned down both ways.
"""

from __future__ import annotations

import pytest

from te_ccl.errors import SpecError
from te_ccl.verify.msccl.verify import verify_msccl

from .xmltools import algo_xml, edit

CPY = "cpy"


def two(coll: str, nchunks: int, g0: dict, g1: dict, inplace: int = 0) -> str:
    return algo_xml(coll, 2, nchunks, {0: g0, 1: g1}, inplace=inplace)


def allgather(inplace: int) -> str:
    if inplace:  # only o: rank r's input is o[r]
        def g(r):
            return {"o": 2, "tbs": [(1 - r, 1 - r, 0, [("s", "o", r, "o", r),
                                                       ("r", "o", 1 - r, "o", 1 - r)])]}
        return two("allgather", 2, g(0), g(1), inplace=1)

    def g(r):
        return {"i": 1, "o": 2, "tbs": [(1 - r, 1 - r, 0, [("s", "i", 0, "o", 0),
                                                           ("r", "i", 0, "o", 1 - r)]),
                                        (-1, -1, 0, [(CPY, "i", 0, "o", r)])]}
    return two("allgather", 2, g(0), g(1))


def alltoall() -> str:
    def g(r):
        return {"i": 2, "o": 2, "tbs": [(1 - r, 1 - r, 0, [("s", "i", 1 - r, "o", 0),
                                                           ("r", "i", 0, "o", 1 - r)]),
                                        (-1, -1, 0, [(CPY, "i", r, "o", r)])]}
    return two("alltoall", 2, g(0), g(1))


def allreduce(inplace: int) -> str:
    out = "i" if inplace else "o"

    def g(r):
        return {"i": 1, "o": 0 if inplace else 1,
                "tbs": [(1 - r, 1 - r, 0, [("s", "i", 0, "o", 0), ("rrc", "i", 0, out, 0)])]}
    return two("allreduce", 1, g(0), g(1), inplace=inplace)


def reducescatter(inplace: int) -> str:
    def g(r):
        dst = ("i", r) if inplace else ("o", 0)
        return {"i": 2, "o": 0 if inplace else 1,
                "tbs": [(1 - r, 1 - r, 0, [("s", "i", 1 - r, "o", 0), ("rrc", "i", r, *dst)])]}
    return two("reducescatter", 2, g(0), g(1), inplace=inplace)


def broadcast() -> str:  # root 0
    g0 = {"i": 1, "o": 1, "tbs": [(1, -1, 0, [("s", "i", 0, "o", 0)]),
                                  (-1, -1, 0, [(CPY, "i", 0, "o", 0)])]}
    g1 = {"i": 1, "o": 1, "tbs": [(-1, 0, 0, [("r", "i", 0, "o", 0)])]}
    return two("broadcast", 1, g0, g1)


def reduce() -> str:  # root 1
    g0 = {"i": 1, "o": 1, "tbs": [(1, -1, 0, [("s", "i", 0, "o", 0)])]}
    g1 = {"i": 1, "o": 1, "tbs": [(-1, 0, 0, [("rrc", "i", 0, "o", 0)])]}
    return two("reduce", 1, g0, g1)


def gather() -> str:  # root 0; nchunksperloop = chunks per rank (the runtime's mult is 1)
    g0 = {"i": 1, "o": 2, "tbs": [(-1, 1, 0, [("r", "i", 0, "o", 1)]),
                                  (-1, -1, 0, [(CPY, "i", 0, "o", 0)])]}
    g1 = {"i": 1, "o": 2, "tbs": [(0, -1, 0, [("s", "i", 0, "o", 0)])]}
    return two("gather", 1, g0, g1)


def scatter() -> str:  # root 0
    g0 = {"i": 2, "o": 1, "tbs": [(1, -1, 0, [("s", "i", 1, "o", 0)]),
                                  (-1, -1, 0, [(CPY, "i", 0, "o", 0)])]}
    g1 = {"i": 2, "o": 1, "tbs": [(-1, 0, 0, [("r", "i", 0, "o", 0)])]}
    return two("scatter", 1, g0, g1)


VALID = {
    "allgather-out": allgather(0), "allgather-in": allgather(1), "alltoall": alltoall(),
    "allreduce-out": allreduce(0), "allreduce-in": allreduce(1),
    "reducescatter-out": reducescatter(0), "reducescatter-in": reducescatter(1),
    "broadcast": broadcast(), "reduce": reduce(), "gather": gather(), "scatter": scatter(),
}
ROOTS = {"broadcast": 0, "reduce": 1, "gather": 0, "scatter": 0}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_program(name: str) -> None:
    report = verify_msccl(VALID[name])
    assert report.valid, [f.message for f in report.findings]
    if name in ROOTS:
        assert (report.root, report.root_inferred) == (ROOTS[name], True)
        assert any("inferred" in n for n in report.notes)


# one-line changes that break the result: (program, step key, attribute changes)
BROKEN = {
    "allgather-out": ((0, 1, 0), {"dstoff": 1}),          # own chunk to the wrong place
    "allgather-in": ((1, 0, 0), {"srcoff": 0}),            # sends o[0] it never had
    "alltoall": ((0, 0, 0), {"srcoff": 0}),                # sends its own chunk
    "allreduce-out": ((1, 0, 1), {"type": "r"}),           # receives without reducing
    "allreduce-in": ((0, 0, 1), {"type": "r"}),
    "reducescatter-out": ((0, 0, 0), {"srcoff": 0}),
    "reducescatter-in": ((1, 0, 1), {"srcoff": 0, "dstoff": 0}),
    "broadcast": ((0, 1, 0), {"type": "nop", "cnt": 0, "depid": 0, "deps": 0}),
    "reduce": ((1, 0, 0), {"type": "r"}),
    "gather": ((0, 0, 0), {"dstoff": 0}),
    "scatter": ((0, 0, 0), {"srcoff": 0}),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_program(name: str) -> None:
    key, changes = BROKEN[name]
    report = verify_msccl(edit(VALID[name], key, **changes), root=ROOTS.get(name))
    assert "wrong-result" in report.rules() or "uninitialized-read" in report.rules(), \
        [f.message for f in report.findings]


def test_explicit_wrong_root_is_a_wrong_result() -> None:
    report = verify_msccl(broadcast(), root=1)
    assert (report.root, report.root_inferred) == (1, False)
    assert "wrong-result" in report.rules()


def test_root_outside_the_ranks_is_bad_input() -> None:
    with pytest.raises(SpecError, match="root 5"):
        verify_msccl(broadcast(), root=5)


def test_root_cannot_be_inferred_without_traffic() -> None:
    idle = {"i": 1, "o": 1, "tbs": [(-1, -1, 0, [(CPY, "i", 0, "o", 0)])]}
    report = verify_msccl(two("broadcast", 1, idle, idle))
    assert "root" in report.rules()


def test_unordered_writes_of_one_chunk_are_a_race() -> None:
    # two thread blocks of gpu 1 write o[0] with nothing ordering them
    g0 = {"i": 1, "o": 2, "tbs": [(1, -1, 0, [("s", "i", 0, "o", 0)]),
                                  (-1, -1, 0, [(CPY, "i", 0, "o", 0)])]}
    g1 = {"i": 1, "o": 2, "tbs": [(-1, 0, 0, [("r", "i", 0, "o", 0)]),
                                  (-1, -1, 0, [(CPY, "i", 0, "o", 0), (CPY, "i", 0, "o", 1)])]}
    text = two("allgather", 2, g0, g1)
    assert "data-race" in verify_msccl(text).rules()
    # the same writes ordered by a dependency are not a race (the result is then wrong)
    ordered = edit(edit(text, (1, 0, 0), hasdep=1), (1, 1, 0), depid=0, deps=0)
    assert "data-race" not in verify_msccl(ordered).rules()


@pytest.mark.parametrize(("deps", "race"), [(0, True), (1, False), (2, False)])
def test_a_wait_is_ordered_after_the_first_flag_that_meets_it(deps: int, race: bool) -> None:
    # tb 0 publishes flags 0 and 2 and writes o[0] between them, unpublished; tb 1 waits
    # for flag ``deps`` and reads o[0]: only flag 2 (the first >= 1 or 2) orders the write
    g1 = {"i": 1, "o": 2, "s": 1,
          "tbs": [(-1, -1, 0, [(CPY, "i", 0, "o", 1, 1, -1, -1, 1), (CPY, "i", 0, "o", 0),
                               (CPY, "i", 0, "o", 1, 1, -1, -1, 1)]),
                  (-1, -1, 0, [(CPY, "o", 0, "s", 0, 1, 0, deps)])]}
    g0 = {"i": 1, "o": 2, "tbs": [(-1, -1, 0, [(CPY, "i", 0, "o", 0)])]}
    assert ("data-race" in verify_msccl(two("allgather", 2, g0, g1)).rules()) == race


def test_read_of_a_chunk_never_written() -> None:
    g = {"i": 1, "o": 2, "s": 1, "tbs": [(-1, -1, 0, [(CPY, "s", 0, "o", 0)])]}
    report = verify_msccl(two("allgather", 2, g, g))
    bad = [f for f in report.findings if f.rule == "uninitialized-read"]
    assert {(f.gpu, f.tb, f.step) for f in bad} == {(0, 0, 0), (1, 0, 0)}
    assert "s[0]" in bad[0].message


def test_root_inference_survives_garbage_in_the_output() -> None:
    # found by the property test: rank 0 sends an output chunk it never wrote
    text = edit(reduce(), (0, 0, 0), srcbuf="o")
    assert {"uninitialized-read", "root"} <= verify_msccl(text).rules()
    assert {"uninitialized-read", "wrong-result"} <= verify_msccl(text, root=1).rules()


def test_declared_buffer_larger_than_the_users_buffer() -> None:
    text = allgather(0).replace('i_chunks="1"', 'i_chunks="2"', 1)
    bad = [f for f in verify_msccl(text).findings if f.rule == "buffer-size"]
    assert bad and bad[0].gpu == 0 and "only 1" in bad[0].message


def test_both_modes_are_executed_and_tagged() -> None:
    text = allgather(1).replace('outofplace="0"', 'outofplace="1"', 1)
    report = verify_msccl(text)
    assert not report.valid
    assert all(f.message.startswith("[out-of-place]") for f in report.findings)
    assert "uninitialized-read" in report.rules()
    assert verify_msccl(allgather(1)).valid
