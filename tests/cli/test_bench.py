"""`teccl bench quick` end to end (small solves) and `teccl baseline` JSON form."""

import json

from te_ccl.report.readme import END, START


def test_bench_quick_writes_outputs_and_judges_targets(teccl, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\n{END}\n")
    out = tmp_path / "b"
    code, stdout, _ = teccl("bench", "quick", "--out", str(out), "--threads", "1", "--json",
                            "--readme", str(readme))
    info = json.loads(stdout)
    assert code == (0 if all(t["met"] for t in info["targets"]) else 1)
    assert (out / "results.csv").exists() and (out / "plots" / "ring8.png").exists()
    assert "#### Targets" in readme.read_text()
    names = [t["name"] for t in info["targets"]]
    assert "ring8: teccl >= every baseline at every size" in names
    assert not any("mesh32x32" in n for n in names)  # only the suite's own targets
    code, _, _ = teccl("bench", "quick", "--out", str(out), "--budget", "0", "--no-fail",
                       "--json")
    assert code == 0


def test_bench_unknown_suite_is_exit_2(teccl):
    code, _, err = teccl("bench", "nope")
    assert code == 2 and "unknown suite" in err
