"""msccl-tools' older format: `teccl simulate` takes it with a warning, and
`teccl verify --upgrade -o NEW.xml` writes the executor's format when the rest is valid."""

from __future__ import annotations

import pytest

from te_ccl.verify.msccl import read_msccl

from .xmltools import reference, reference_files

RING = "azure_allgather_ring_8_1_1.xml"
NEW_ATTRS = ' outofplace="0" minBytes="0" maxBytes="0"'


def _legacy(tmp_path):
    path = tmp_path / "legacy.xml"
    path.write_text(reference(RING).replace(NEW_ATTRS, "", 1))
    return path


def test_upgrade_restores_the_executor_format_byte_for_byte(teccl, tmp_path):
    out = tmp_path / "new.xml"
    code, stdout, _ = teccl("verify", str(_legacy(tmp_path)), "--upgrade", "-o", str(out))
    assert code == 0 and "added outofplace, minBytes, maxBytes" in stdout
    assert out.read_text() == reference(RING)
    assert read_msccl(out).max_bytes == 0


def test_the_stock_legacy_files_upgrade_to_valid_files(teccl, tmp_path):
    legacy = [p for p in reference_files() if p.name.startswith("legacy_")]
    assert legacy
    for path in legacy:
        code, _, _ = teccl("verify", str(path))
        assert code == 1
        out = tmp_path / path.name
        code, stdout, _ = teccl("verify", str(path), "--upgrade", "-o", str(out))
        assert code == 0, stdout
        assert teccl("verify", str(out))[0] == 0


def test_an_invalid_legacy_file_is_not_written(teccl, tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text(_legacy(tmp_path).read_text().replace('cnt="1"', 'cnt="100"', 1))
    out = tmp_path / "new.xml"
    code, stdout, _ = teccl("verify", str(bad), "--upgrade", "-o", str(out))
    assert code == 1 and "nothing written" in stdout and not out.exists()


@pytest.mark.parametrize("args", [("--upgrade",), ("-o", "x.xml")])
def test_upgrade_and_output_go_together(teccl, tmp_path, args):
    code, _, err = teccl("verify", str(_legacy(tmp_path)), *args)
    assert code == 2 and err.count("\n") == 1


def test_simulate_takes_the_older_format_with_a_warning(teccl, tmp_path):
    code, out, err = teccl("simulate", "dgx1", str(_legacy(tmp_path)), "-s", "1MB", "--json")
    assert code == 0 and '"finish_time_s"' in out
    assert "older format" in err and "--upgrade" in err
    code, _, err = teccl("simulate", "dgx1", str(tmp_path / "legacy.xml"), "-s", "1MB")
    assert err.count("older format") == 1


def test_verify_names_the_upgrade_for_an_older_file(teccl, tmp_path):
    code, out, _ = teccl("verify", str(_legacy(tmp_path)))
    assert code == 1 and "--upgrade -o NEW.xml" in out
    code, out, _ = teccl("verify", str(_legacy(tmp_path)), "--json")
    assert any("--upgrade" in n for n in __import__("json").loads(out)["notes"])
