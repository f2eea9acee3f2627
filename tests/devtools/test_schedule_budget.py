"""The size budget of schedules/: a combination with a file over it is recorded as skipped."""

from __future__ import annotations

from devtools.ship_schedules import within_budget


def _entry(tmp_path, sizes: dict[str, int]) -> dict:
    (tmp_path / "box").mkdir()
    for name, size in sizes.items():
        (tmp_path / "box" / name).write_bytes(b"x" * size)
    return {"topology": "box", "collective": "alltoall", "ngpus": 8, "status": "ok",
            "files": [f"box/{n}" for n in sizes]}


def test_within_budget_keeps_the_entry(tmp_path):
    entry = _entry(tmp_path, {"alltoall.xml": 1000, "alltoall.json": 10})
    assert within_budget(entry, tmp_path, 1024) is entry


def test_over_budget_is_skipped_and_its_files_removed(tmp_path):
    entry = _entry(tmp_path, {"alltoall.xml": 3 << 20, "alltoall.inplace.xml": 10})
    out = within_budget(entry, tmp_path, 256 << 10)
    assert out["status"] == "skipped" and "box/alltoall.xml is 3.0 MiB" in out["reason"]
    assert "256 KiB per file" in out["reason"]
    assert not any((tmp_path / "box").iterdir())


def test_a_combination_over_budget_is_shipped_again_with_whole_chunks(tmp_path):
    from devtools import ship_schedules

    caps = []

    def ship(topo, kind, out_dir, limit_s, hard_s, max_subchunks=None, max_file_bytes=None):
        caps.append(max_subchunks)
        (out_dir / topo.name).mkdir(exist_ok=True)
        (out_dir / topo.name / f"{kind}.xml").write_bytes(b"x" * (4096 * max_subchunks))
        return {"topology": topo.name, "collective": kind, "ngpus": topo.ngpus, "status": "ok",
                "finish_time_s": 1.0, "algbw_GBps": 1.0, "bound_ratio": 1.0, "optimal": False,
                "files": [f"{topo.name}/{kind}.xml"]}

    (entry,) = ship_schedules.ship_all(tmp_path, topologies=["fc8"], kinds=("allgather",),
                                       max_file_bytes=6000, ship=ship)
    assert caps == [2, 1] and entry["status"] == "ok"
    assert (tmp_path / "fc8" / "allgather.xml").stat().st_size == 4096


def test_the_readme_lists_every_combination_and_says_how_to_make_larger_machines():
    from devtools.ship_schedules import MAX_GPUS, _readme

    entry = {"topology": "small", "collective": "allgather", "ngpus": 8, "status": "ok",
             "finish_time_s": 1e-3, "measured_by": "xml replay", "algbw_GBps": 64.0,
             "bound_ratio": 1.01, "optimal": False, "files": ["small/allgather.xml"]}
    readme = _readme([entry])
    assert f"machines of up to {MAX_GPUS} GPUs" in readme and "--max-gpus 64" in readme
    assert "| small | 8 | allgather | ok | MSCCL XML | 1000.0 us | xml replay | 64.0 | 1.010 | no |" \
        in readme
