"""Every command README.md and docs/ show runs (devtools/doccheck.py), and the checker itself
catches what it is there to catch."""

from __future__ import annotations

import re

import pytest

from devtools.doccheck import REPO, DocError, check, documents, parse


@pytest.mark.slow
@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.name)
def test_every_command_of_the_document_runs(doc):
    failed = [f"{o.doc}:{o.line}: {o.command}: {o.detail}" for o in check(doc) if not o.ok]
    assert not failed, "\n".join(failed)


def test_the_docs_show_commands():
    blocks = [b for doc in documents() for b in parse(doc)]
    assert sum(len(b.commands) for b in blocks) >= 40
    assert sum(bool(b.slow) for b in blocks) <= 8  # parse-only stays the exception


def write(tmp_path, text):
    doc = tmp_path / "page.md"
    doc.write_text(text)
    return doc


def outcomes(tmp_path, text):
    return [(o.ran, o.ok) for o in check(write(tmp_path, text))]


def test_a_later_command_reads_what_an_earlier_block_wrote(tmp_path):
    text = ("```sh\nteccl baseline ring ring8 -c allgather -s 1MB -o r.xml  # a comment\n```\n\n"
            "```console\n$ teccl verify r.xml\nr.xml: allgather … valid\n```\n")
    assert outcomes(tmp_path, text) == [(True, True), (True, True)]


def test_a_failing_command_fails_and_an_expected_exit_code_passes(tmp_path):
    assert outcomes(tmp_path, "```sh\nteccl verify missing.xml\n```\n") == [(True, False)]
    assert outcomes(tmp_path, "<!-- doccheck: exit 2 -->\n```sh\nteccl verify missing.xml\n```\n") \
        == [(True, True)]


def test_slow_commands_are_parsed_not_run(tmp_path):
    head = "<!-- doccheck: slow (too big) -->\n```sh\n"
    assert outcomes(tmp_path, head + "teccl compile mesh32x32 -c allgather -s 1GiB \\\n  -o ag.xml\n"
                    "teccl verify ag.xml\n```\n") == [(False, True), (False, True)]
    for bad in ("teccl compile dgx1 --bogus", "teccl compile no-such-topology -c allgather",
                "teccl verify never-written.xml", "teccl nosuchcommand",
                "python -m devtools.ship_schedules out --no-such-flag",
                "python -m devtools.no_such_tool"):
        assert outcomes(tmp_path, head + bad + "\n```\n") == [(False, False)], bad


def test_make_targets_are_looked_up_not_run(tmp_path):
    assert outcomes(tmp_path, "```sh\nmake test\nmake no-such-target\n```\n") \
        == [(False, True), (False, False)]


def test_jq_checks_the_key(tmp_path):
    base = "```sh\nteccl topo show ring8 --json | jq "
    assert outcomes(tmp_path, base + ".ngpus\n```\n") == [(True, True)]
    assert outcomes(tmp_path, base + ".no_such_key\n```\n") == [(True, False)]


def test_python_blocks_run(tmp_path):
    assert outcomes(tmp_path, "```python\nimport te_ccl\nassert te_ccl.__version__\n```\n") == [(True, True)]
    assert outcomes(tmp_path, "```python\nraise ValueError('no')\n```\n") == [(True, False)]
    slow = "<!-- doccheck: slow (why) -->\n```python\n"
    assert outcomes(tmp_path, slow + "raise ValueError('no')\n```\n") == [(False, True)]
    assert outcomes(tmp_path, slow + "def (\n```\n") == [(False, False)]


@pytest.mark.parametrize("text, expect", [
    ("```\nteccl topo list\n```\n", "label it sh"),
    ("```sh\nls -l\n```\n", "not a command the doc check knows"),
    ("<!-- doccheck: slow -->\n```sh\nteccl topo list\n```\n", "needs a reason"),
    ("<!-- doccheck: fast -->\n```sh\nteccl topo list\n```\n", "unknown directive"),
    ("<!-- doccheck: given a.xml=no/such/file -->\n```sh\nteccl topo list\n```\n", "no such file"),
    ("```sh\n# only a comment\n```\n", "without a command"),
])
def test_a_page_breaking_the_conventions_is_refused(tmp_path, text, expect):
    with pytest.raises(DocError, match=expect):
        for o in check(write(tmp_path, text)):
            if not o.ok:
                raise DocError(o.detail)


REPO_PATH = re.compile(r"(?<![\w/.])((?:te_ccl|tests|devtools|examples|schedules|topologies)"
                       r"/[\w./*-]*[\w*])")
PLACEHOLDER = re.compile(r"\b[A-Z]{2,}\b")  # TOPOLOGY, FILE, NAME: a path the reader fills in


def test_every_repository_path_the_docs_name_exists():
    missing = []
    for doc in documents():
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for path in REPO_PATH.findall(line):
                path = path.split("::")[0]
                if PLACEHOLDER.search(path) or any(REPO.glob(path)) or (REPO / path).exists():
                    continue
                missing.append(f"{doc.name}:{number}: {path}")
    assert not missing, "\n".join(missing)
