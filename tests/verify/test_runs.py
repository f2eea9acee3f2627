"""Steps of several chunks are checked as whole runs where no access can report anything
(:mod:`te_ccl.verify.msccl.memory`): the report must be the one chunk-by-chunk checking
gives, findings and their order included, for valid files and for broken ones."""

from __future__ import annotations

import random

import pytest

from te_ccl.verify.msccl import execute, verify_msccl
from tests.verify.xmltools import algo_xml, attrs, edit, locate, reference

_FIELDS = {"srcoff": (0, 1, 2, 5), "dstoff": (0, 1, 2, 5), "cnt": (1, 2, 4, 6),
           "deps": (-1, 0, 1), "depid": (-1, 0, 1), "type": ("s", "r", "rrc", "cpy", "rcs")}


def _two_gpus(cnt: int = 4) -> str:
    """Rank 0 sends its 4 chunks to rank 1 in one step and back; both copy their input."""
    tbs = {g: [(1 - g, -1, 0, [("cpy", "i", 0, "o", 4 * g, cnt, -1, -1, 1),
                               ("s", "o", 4 * g, "o", -1, cnt, 0, 0, 0)]),
               (-1, 1 - g, 0, [("r", "i", -1, "o", 4 * (1 - g), cnt)])] for g in (0, 1)}
    return algo_xml("allgather", 2, 8, {g: {"i": 4, "o": 8, "tbs": tbs[g]} for g in (0, 1)})


def _mutants(text: str, seed: str, n: int) -> list[str]:
    rng, steps = random.Random(seed), [k for k in locate(text) if len(k) == 3]
    out = []
    for _ in range(n):
        key, (name, values) = rng.choice(steps), rng.choice(sorted(_FIELDS.items()))
        if name in attrs(text, key):
            out.append(edit(text, key, **{name: rng.choice(values)}))
    return out


def _same_as_chunk_by_chunk(text: str, monkeypatch: pytest.MonkeyPatch) -> str:
    runs = verify_msccl(text)
    with monkeypatch.context() as m:
        m.setattr(execute, "RUN_FROM", 1 << 30)
        chunks = verify_msccl(text)
    assert (runs.findings, runs.counts, runs.notes) == (chunks.findings, chunks.counts,
                                                       chunks.notes)
    return ",".join(sorted(runs.rules()))


def test_runs_report_what_chunks_do_on_a_small_file(monkeypatch):
    assert _same_as_chunk_by_chunk(_two_gpus(), monkeypatch) == ""
    rules = {_same_as_chunk_by_chunk(t, monkeypatch) for t in _mutants(_two_gpus(), "two", 60)}
    assert {"data-race", "uninitialized-read", "wrong-result"} <= set(",".join(rules).split(","))


@pytest.mark.parametrize("name", ["azure_allgather_recursive_doubling_8_1.xml",
                                  "azure_allreduce_1step_4_1.xml",
                                  "azure_alltoall_a100_two_step_2_4.xml"])
def test_runs_report_what_chunks_do_on_reference_files(name, monkeypatch):
    text = reference(name)
    _same_as_chunk_by_chunk(text, monkeypatch)
    for mutant in _mutants(text, name, 25):
        _same_as_chunk_by_chunk(mutant, monkeypatch)
