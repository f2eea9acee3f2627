"""A saved bench run's header: commit, load, command and cores, and its markdown line."""

import json
import subprocess
import sys

from devtools import provenance


def test_a_header_names_the_commit_the_load_at_start_and_end_and_the_command():
    header = provenance.finish(provenance.start(["python", "-m", "devtools.x", "--only", "a b"]))
    assert header["command"] == "python -m devtools.x --only 'a b'"
    assert len(header["load"]) == 2 and header["cpus"] >= 1
    assert header["commit"] == provenance.commit()
    line = provenance.line(header)
    assert header["commit"] in line and "`python -m devtools.x --only 'a b'`" in line


def test_a_run_saved_without_a_header_says_so():
    assert provenance.line(None) == "Run: header not recorded."
    old = provenance.line({"cpus": 2, "commits": ["abc1234+"]})
    assert "abc1234+" in old and "load not recorded" in old and "command not recorded" in old


def test_jobs_bench_table_reads_the_saved_run_with_and_without_a_header(tmp_path):
    row = {"topology": "ndv2x4", "scenario": "2 jobs, apart", "shared_links": 0,
           "method": "alone", "joint_s": 0.01, "together_s": 0.01, "ratio": 1.0,
           "goal": "= 1", "met": True, "bound_s": 0.009}
    header = {"commit": "abc1234", "load": [1.0, 2.0], "command": "python -m x", "cpus": 2}
    for saved, first in (([row], "Run: header not recorded."),
                         ({"header": header, "rows": [row]}, provenance.line(header))):
        path = tmp_path / "jobs.json"
        path.write_text(json.dumps(saved))
        out = subprocess.run([sys.executable, "-m", "devtools.jobs_bench", "--table", str(path)],
                             capture_output=True, text=True, check=True).stdout
        assert out.splitlines()[0] == first and "| ndv2x4 | 2 jobs, apart |" in out
