"""Targets, markdown/CSV/plots and the README filler, on synthetic benchmark rows."""

import pytest

from devtools.readme import END, START, fill_readme
from devtools.render import results_csv, write_outputs
from devtools.runner import BenchResult, Row
from devtools.suites import GB, KB, SUITES
from devtools.targets import anchors, evaluate_targets
from te_ccl.errors import SpecError


def row(system, time_s, size=GB, topo="ring8", kind="allgather", **kw):
    base = dict(topology=topo, ngpus=8, collective=kind, size_bytes=size, chunks=1,
                group="suite", system=system, time_s=time_s, schedule_s=time_s,
                predicted_s=time_s * 1.1, algbw_GBps=size / time_s / 1e9, bound_s=1.0,
                cut_s=1.0, alpha_s=time_s / 1.1, ratio=time_s, solver_time_s=1.0, optimal=True)
    base.update(kw)
    return Row(**base)


def by_name(targets):
    return {t.name: t for t in targets}


def test_teccl_slower_than_a_baseline_is_short():
    rows = [row("teccl", 1.02), row("baseline:ring", 1.5),
            row("teccl", 2.0, size=KB), row("baseline:direct", 1.9, size=KB)]
    t = by_name(evaluate_targets(rows))
    beat = t["ring8: teccl >= every baseline at every size"]
    assert not beat.met and "direct" in beat.measured
    assert t["ring8 allgather 1 GB vs cut bound"].met  # 1.02 <= 1.03
    assert t["ring8 allgather 1 KB vs alpha-diameter bound"].met  # 1.1 <= 1.2
    assert t["ring8 allgather 1 chunk(s)/GPU proven optimal"].met  # optimal in 1 s
    assert t["ring8 allgather 2 chunk(s)/GPU proven optimal"].measured == "not run"


def test_failed_or_missing_rows_are_short_not_met():
    rows = [row("teccl", 1.0, topo="ndv2x2", status="failed: time limit"),
            row("teccl", 1.0, topo="dgx1", optimal=False)]
    planned = {("ndv2x2", "allgather", GB, 1), ("dgx1", "allgather", GB, 1),
               ("mesh8x8", "allgather", 2**30, 1)}
    t = by_name(evaluate_targets(rows, planned))
    assert not t["ndv2x2 allgather 1 GB algbw vs cut bound"].met
    assert "failed" in t["ndv2x2 allgather 1 GB algbw vs cut bound"].measured
    assert not t["dgx1 allgather 1 chunk(s)/GPU proven optimal"].met
    assert t["mesh8x8 allgather 1 GiB"].measured == "not run"
    assert "ring8 allgather 1 chunk(s)/GPU proven optimal" not in t  # not planned


def test_outputs_and_readme(tmp_path):
    rows = [row("teccl", 1.0), row("baseline:ring", 2.0),
            row("teccl", 1e-5, size=KB), row("baseline:ring", 2e-5, size=KB)]
    res = BenchResult("t", rows, 1.0)
    paths = write_outputs(res, tmp_path / "bench")
    md = paths["markdown"].read_text()
    assert "| ring8 allgather 1 GB vs cut bound |" in md and "TE-CCL (Gurobi)" in md
    assert (tmp_path / "bench" / "plots" / "ring8.png").read_bytes()[:4] == b"\x89PNG"
    assert results_csv(rows).splitlines()[0].startswith("topology,ngpus,collective")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{START}\nold\n{END}\ntail\n")
    assert fill_readme(readme, paths["markdown"])
    text = readme.read_text()
    assert "old" not in text and "](bench/plots/ring8.png)" in text and text.endswith("tail\n")
    assert not fill_readme(readme, paths["markdown"])  # idempotent
    readme.write_text("no markers")
    with pytest.raises(SpecError, match="bench:start"):
        fill_readme(readme, paths["markdown"])


def test_anchor_rows_and_suites():
    a = anchors([row("teccl", 0.05, topo="ndv2x2")])
    mine = [x for x in a if x.system == "teccl (this run)" and x.size_bytes == GB]
    assert mine[0].algbw_GBps == pytest.approx(20.0)
    assert {"default", "quick"} <= set(SUITES)
    sizes = {c.size_bytes for c in SUITES["default"].cases if c.group == "suite"}
    assert min(sizes) == KB and max(sizes) == GB


def test_target_rows_say_which_chunking_was_picked():
    t = by_name(evaluate_targets([row("teccl", 1.01, picked_chunks=4)]))
    assert t["ring8 allgather 1 GB vs cut bound"].measured.startswith(
        "1.010, epochs 1.111, 4 chunk(s)/GPU in")


def test_a_scale_target_without_a_file_is_judged_on_its_solve_and_says_so():
    t = by_name(evaluate_targets([row("teccl", 1.004, size=2**30, topo="mesh32x32", ngpus=1024,
                                      measured_by="epoch model")]))
    target = t["mesh32x32 allgather 1 GiB"]
    assert target.measured.startswith("epoch model 1.004")
    assert "bench-xml" in target.goal and target.met
    t = by_name(evaluate_targets([row("teccl", 1.04, size=2**30, topo="mesh32x32", ngpus=1024,
                                      measured_by="epoch model", solver_time_s=61.0)]))
    assert not t["mesh32x32 allgather 1 GiB"].met  # judged on its solver time
    t = by_name(evaluate_targets([row("teccl", 1.004, size=2**30, topo="mesh32x32", ngpus=1024,
                                      measured_by="xml replay")]))
    assert "bench-xml" not in t["mesh32x32 allgather 1 GiB"].goal


def test_xml_loss_target_names_the_worst_row():
    rows = [row("teccl", 1.0, xml_ratio=1.004), row("baseline:ring", 1.5, xml_ratio=1.2),
            row("teccl", 2.0, size=KB, xml_ratio=None)]
    target = by_name(evaluate_targets(rows))["XML replay / schedule replay, every row"]
    assert not target.met and "1.200" in target.measured and "1 of 2 rows over" in target.measured
    rows[1] = row("baseline:ring", 1.5, xml_ratio=1.01)
    assert by_name(evaluate_targets(rows))["XML replay / schedule replay, every row"].met


def test_dgx1_and_the_4x4_grids_must_come_within_two_percent_of_the_cut_bound():
    rows = [row("teccl", 1.025, topo="dgx1"), row("teccl", 1.02, topo="mesh4x4"),
            row("teccl", 1.025, topo="ring8")]
    t = by_name(evaluate_targets(rows))
    dgx1 = t["dgx1 allgather 1 GB vs cut bound"]
    assert not dgx1.met and dgx1.goal == "<= 1.02"
    assert t["mesh4x4 allgather 1 GB vs cut bound"].met
    assert t["ring8 allgather 1 GB vs cut bound"].met  # others: 1.03
