"""Size ranges (``--sizes``): they cover the span without overlap, and ranges whose
schedules agree merge."""

import json
from pathlib import Path

import pytest

from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.compiler.sizes import compile_size_ranges, parse_size_range, size_ranges
from te_ccl.errors import SpecError
from te_ccl.schedule import Schedule
from te_ccl.topology import generators as gen


def test_size_ranges_cover_without_overlap():
    r = size_ranges(1000, 10**9, step=4)
    assert r[0][0] == 1000 and r[-1][1] == 10**9
    assert all(b[0] == a[1] + 1 for a, b in zip(r, r[1:], strict=False))
    assert all(lo & (lo - 1) == 0 for lo, _ in r[1:])  # powers of two (of four)
    assert size_ranges(5, 7, step=2) == [(5, 7)]
    assert parse_size_range("1KB..1MB") == (1000, 10**6)
    with pytest.raises(SpecError, match="--sizes"):
        parse_size_range("1MB..1KB")
    with pytest.raises(SpecError):
        size_ranges(1, 10, step=3)


def test_compile_size_ranges_merges_identical_schedules():
    t = gen.ring(4, 50e9, 1e-6)
    coll = Collective(K.ALLGATHER, 4000, (0, 1, 2, 3))
    seen = []

    small = build_baseline("direct", t, coll).transfers
    large = build_baseline("ring", t, coll).transfers

    def compile_one(c):  # one algorithm below 64 KiB, another above
        seen.append(c.size_bytes)
        return Schedule(t, c, 1e-6, small if c.size_bytes < 65536 else large)

    out = compile_size_ranges(coll, 1000, 10**6, compile_one, step=4)
    assert len(seen) == 6 and all(1000 <= s <= 10**6 for s in seen)
    assert [(o.min_bytes, o.max_bytes) for o in out] == [(1000, 65535), (65536, 10**6)]
    assert out[1].schedule.collective.size_bytes == seen[4]


def test_out_of_time_while_lowering_the_last_range_writes_the_ranges_made(
        teccl, tmp_path, monkeypatch):
    """The clock passes the deadline as the last range's file is lowered (a slow lowering):
    the library keeps the range made, verified, exits 0 and names the range not made."""
    import time

    import te_ccl.compiler.pipeline as pipeline
    from te_ccl.deadline import check
    from te_ccl.verify.msccl.verify import verify_msccl

    real_render, real_clock, late = pipeline.render_fitting, time.monotonic, [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: real_clock() + late[0])

    def slow(schedule, options, *args, **kwargs):
        if options.min_bytes == 4096:  # the last range: its lowering outlasts the limit
            late[0] = 1e6
            check("lowering the schedule to MSCCL XML")
        return real_render(schedule, options, *args, **kwargs)

    monkeypatch.setattr(pipeline, "render_fitting", slow)
    code, out, err = teccl("compile", "ring8", "-c", "allgather", "--sizes", "1KiB..4KiB",
                           "-o", str(tmp_path / "lib"), "--time-limit", "600", "--json")
    assert code == 0, err
    [made] = json.loads(out)["algorithms"]
    assert (made["min_bytes"], made["max_bytes"]) == (1024, 4095)
    assert any("not 4096..4096 bytes" in n and "time limit of 600 s" in n
               for n in made["notes"])
    assert [p.name for p in (tmp_path / "lib").iterdir()] == [Path(made["output"]).name]
    assert verify_msccl(made["output"]).valid


def test_out_of_time_before_any_range_is_made_exits_3_naming_the_first(
        teccl, tmp_path, monkeypatch):
    import time

    import te_ccl.compiler.pipeline as pipeline
    from te_ccl.deadline import check

    real_clock, late = time.monotonic, [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: real_clock() + late[0])

    def slow(*args, **kwargs):
        late[0] = 1e6
        check("lowering the schedule to MSCCL XML")

    monkeypatch.setattr(pipeline, "render_fitting", slow)
    code, _, err = teccl("compile", "ring8", "-c", "allgather", "--sizes", "1KiB..4KiB",
                         "-o", str(tmp_path / "lib"), "--time-limit", "600")
    assert code == 3 and "size range 1024..4095 bytes (1 of 2)" in err
    assert not (tmp_path / "lib").exists()


def test_a_range_without_a_schedule_is_left_to_the_runtime_and_named():
    from te_ccl.compiler.sizes import SizedSchedule, made_in_time
    from te_ccl.deadline import TimeLimitReached

    t = gen.ring(4, 50e9, 1e-6)
    coll = Collective(K.ALLGATHER, 4000, (0, 1, 2, 3))
    ring = build_baseline("ring", t, coll)
    items = [SizedSchedule(1000, 1023, 1011, ring),
             SizedSchedule(1024, 4095, 2048, None, "size range 1024..4095 bytes (2 of 3, "
                           "0 s of the time left): time limit of 9 s reached"),
             SizedSchedule(4096, 9999, 6400, ring)]
    made, note = made_in_time(items, lambda item: item.min_bytes)
    assert made == [1000, 4096]
    assert note and "wrote 2 of 3 size ranges, not 1024..4095 bytes" in note
    assert "(2 of 3, 0 s of the time left)" in note
    with pytest.raises(TimeLimitReached, match=r"size range 1024\.\.4095 bytes \(2 of 3"):
        made_in_time(items[1:2], lambda item: item.min_bytes)
    assert made_in_time(items[:1], lambda item: item.min_bytes) == ([1000], None)
