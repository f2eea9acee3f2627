"""``teccl baseline`` writes the file a compile would write of the same schedule: it
lowers through the compile's own lowering (within the runtime's limits, merged steps
where one a chunk does not fit), not a lowering of its own."""

from __future__ import annotations

import te_ccl.compiler as compiler


def test_the_baseline_is_lowered_as_a_compile_lowers(teccl, tmp_path, monkeypatch):
    lowered: list[tuple[str | None, bytes]] = []
    real = compiler.lower_file

    def spy(schedule, options, progress=None):
        data = real(schedule, options, progress)
        lowered.append((options.name, data))
        return data

    monkeypatch.setattr(compiler, "lower_file", spy)
    out = tmp_path / "ring.xml"
    code, _, err = teccl("baseline", "ring", "ring8", "-c", "allgather", "-s", "1MB",
                         "-o", str(out))
    assert code == 0, err
    assert lowered == [("ring-allgather-ring8", out.read_bytes())]
