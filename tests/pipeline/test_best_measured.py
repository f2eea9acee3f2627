"""A compile writes the best verified file it has: where the search's file cannot be
written, the fastest file measured while judging (lowered and replayed), once verified,
rather than the first file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import te_ccl.compiler.judge as judge
import te_ccl.verify.msccl.verify as verifying
from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, CompileResult, compile_collective
from te_ccl.errors import RuntimeLimitError
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology.generators import mesh
from te_ccl.verify.msccl.reader import read_msccl

MESH = mesh([4, 4], 50e9)
AG = Collective(CollectiveKind.ALLGATHER, 64 << 20, tuple(range(16)))
PARAMS = SolveParams(time_limit_s=600, threads=1)  # far above the ~2 s a compile takes


def compile_to(out: Path) -> CompileResult:
    return compile_collective(MESH, AG, PARAMS, CompileOptions(output=str(out)))


def refusing(winner: str, why: str) -> Callable:
    """The verifier, refusing the file ``winner`` (an invalid report, or over a runtime
    limit)."""
    real = verifying.verify_msccl

    def patched(text, **kw):
        if text != winner:
            return real(text, **kw)
        if why == "verify":
            return real('<algo name="refused"></algo>')
        raise RuntimeLimitError("cannot keep at most 64 steps per thread block within 32 channels")

    return patched


def replayed(path: Path) -> float:
    return simulate_msccl(read_msccl(path.read_text()), MESH, AG.size_bytes,
                          ranks=AG.ranks).finish_time_s


@pytest.mark.parametrize("why", ["verify", "runtime limit"])
def test_a_search_file_not_written_falls_back_to_the_best_measured_file(tmp_path, monkeypatch,
                                                                        why):
    winner = compile_to(tmp_path / "winner.xml")
    first = winner.incumbents[0]
    assert first.source.startswith("first file") and len(winner.incumbents) == 2
    files: list[tuple[float, bytes]] = []
    real_replay = judge.xml_replay

    def recording(schedule, data, algo=None):
        t = real_replay(schedule, data, algo)
        files.append((t, data))
        return t

    monkeypatch.setattr(judge, "xml_replay", recording)
    monkeypatch.setattr(verifying, "verify_msccl",
                        refusing((tmp_path / "winner.xml").read_text(), why))
    out = tmp_path / "fallback.xml"
    result = compile_to(out)
    others = sorted(f for f in files if f[1].decode() != (tmp_path / "winner.xml").read_text())
    best_s, best = others[0]
    assert best_s < first.ratio * result.lower_bound_s  # a measured file beats the first
    assert out.read_bytes() == best and replayed(out) == pytest.approx(best_s)
    assert result.finish_time_s == pytest.approx(best_s)
    assert [i.source.split(":")[0] for i in result.incumbents] == ["first file", "measured"]
    assert any(n.startswith("anytime: the search's file was not written")
               for n in result.schedule.info.notes)
