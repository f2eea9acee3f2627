from __future__ import annotations

import pytest

from te_ccl.errors import SpecError
from te_ccl.spec.fields import Fields, positive_int
from te_ccl.spec.yamlio import parse_yaml, read_yaml


def test_lines_of_keys_and_items():
    d = parse_yaml("a: 1\nb:\n  - {c: 2}\n  - x\n", "f.yaml")
    assert d.line_of("a") == 1 and d.line_of("b") == 2
    assert d["b"].line_of(0) == 3 and d["b"][0].line_of("c") == 3


def test_duplicate_key():
    with pytest.raises(SpecError, match=r"f.yaml:2: YAML syntax error: duplicate key 'a'"):
        parse_yaml("a: 1\na: 2\n", "f.yaml")


def test_unhashable_key():
    with pytest.raises(SpecError, match="plain value"):
        parse_yaml("? [1, 2]\n: x\n", "f.yaml")


def test_python_tags_refused():
    with pytest.raises(SpecError, match="f.yaml:1"):
        parse_yaml("a: !!python/object/apply:os.system ['true']\n", "f.yaml")


def test_read_errors(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        read_yaml(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="is a directory"):
        read_yaml(tmp_path)
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe\x00a")
    with pytest.raises(SpecError, match="not UTF-8"):
        read_yaml(bad)


def test_fields_unknown_missing_and_type():
    data = parse_yaml("x: 1\ny: -3\n", "f.yaml")
    f = Fields.of(data, "f.yaml", "top")
    with pytest.raises(SpecError, match=r"f.yaml:1: top.x: unknown key; expected one of: y, z"):
        f.check(required=("y",), optional=("z",))
    with pytest.raises(SpecError, match=r"top.z: missing key"):
        Fields.of(parse_yaml("y: 1\n", "f.yaml"), "f.yaml", "top").check(required=("y", "z"))
    with pytest.raises(SpecError, match=r"f.yaml:2: top.y: expected an integer >= 1, got -3"):
        f.get("y", positive_int)
    with pytest.raises(SpecError, match=r"f.yaml:1: top: expected a mapping"):
        Fields.of(parse_yaml("[1]\n", "f.yaml"), "f.yaml", "top")
