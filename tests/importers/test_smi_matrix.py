"""nvidia-smi topo -m and rocm-smi --showtopo text: real outputs import; bad matrices exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from te_ccl.errors import SpecError
from te_ccl.importers import import_file, sniff_format
from te_ccl.importers.smi_matrix import parse_nvidia_smi, parse_rocm_smi, strip_terminal_codes
from te_ccl.spec.topology import load_topology

DATA = Path(__file__).parent / "data"
GB = 1e9


def test_dgx1_matrix_matches_the_shipped_dgx1_model():
    path = DATA / "dgx1-v100-nvidia-smi-topo.txt"
    assert sniff_format(path) == "nvidia-smi"
    r = import_file(path)
    t, ref = r.topology, load_topology("dgx1")
    assert t.gpus == ref.gpus and not t.switches
    assert {k.key: k.bandwidth_Bps for k in t.links} == {k.key: k.bandwidth_Bps for k in ref.links}
    assert any("sm 70" in a for a in r.report.assumed)


def test_matrix_saved_from_a_terminal_imports_as_the_plain_one():
    tty, plain = DATA / "dgx1-v100-nvidia-smi-topo-tty.txt", DATA / "dgx1-v100-nvidia-smi-topo.txt"
    assert "\x1b[4m" in tty.read_text() and sniff_format(tty) == "nvidia-smi"
    r = import_file(tty)
    assert {k.key: k.bandwidth_Bps for k in r.topology.links} == \
        {k.key: k.bandwidth_Bps for k in import_file(plain).topology.links}
    assert any("2 terminal escape codes" in i for i in r.report.ignored)


@pytest.mark.parametrize("text, plain, count", [
    ("\t\x1b[4mGPU0\tGPU1\x1b[0m", "\tGPU0\tGPU1", 2),
    ("\x1b[1;32mNV12\x1b[m X", "NV12 X", 2),
    ("\x1b]0;user@host: ~\x07GPU0\x1b]8;;\x1b\\ GPU1", "GPU0 GPU1", 2),
    ("\x1b(B\x1b[mGPU0\x1b[?2004l\nGPU1", "GPU0\nGPU1", 3),
    ("\x1b]0;never ended\nGPU0", "\nGPU0", 1),  # an open OSC ends with its line
    ("GPU0\tGPU1", "GPU0\tGPU1", 0),
])
def test_terminal_codes_are_stripped(text, plain, count):
    assert strip_terminal_codes(text) == (plain, count)


def test_rocm_table_with_escape_codes():
    text = "\x1b[1m" + _rocm(8, "XGMI").replace("GPU0   ", "\x1b[32mGPU0\x1b[0m   ") + "\x1b[0m"
    m = parse_rocm_smi(text, "r.txt", "r", None)
    assert len(m.topology().links) == 56 and any("escape codes" in i for i in m.report.ignored)


def test_rocm_smi_pcie_pair():
    r = import_file(DATA / "mi100-rocm-smi-showtopo.txt")
    t = r.topology
    assert r.format == "rocm-smi" and t.ngpus == 2 and t.switches == ("cpu0",)
    assert t.link("g0", "cpu0").bandwidth_Bps == pytest.approx(16e9 * 128 / 130 / 8 * 16)


def _nv_matrix(n: int, cell: str, nics: int = 0) -> str:
    cols = [f"GPU{i}" for i in range(n)] + [f"NIC{j}" for j in range(nics)]
    rows = ["\t" + "\t".join(cols) + "\tCPU Affinity\tNUMA Affinity"]
    for i in range(n):
        cells = ["X" if i == j else cell for j in range(n)]
        cells += ["PIX" if j == i // 2 else "SYS" for j in range(nics)]
        rows.append(f"GPU{i}\t" + "\t".join(cells) + "\t0-15\t0")
    return "\n".join(rows + ["", "Legend:", "", "  X    = Self"]) + "\n"


def test_uniform_nv18_is_an_nvswitch_of_h100():
    m = parse_nvidia_smi(_nv_matrix(8, "NV18"), "h.txt", "h", None)
    t = m.topology()
    assert t.switches == ("nvswitch",)
    assert t.link("g0", "nvswitch").bandwidth_Bps == 18 * 25 * GB


def test_pcie_only_box_gets_a_socket_tree():
    text = _nv_matrix(4, "PIX").replace("GPU2\tPIX\tPIX", "GPU2\tSYS\tSYS").replace(
        "GPU3\tPIX\tPIX", "GPU3\tSYS\tSYS")
    text = "\n".join(ln if not ln.startswith(("GPU0", "GPU1")) else
                     ln.split("\t")[0] + "\t" + "\t".join(
                         c if k < 2 else "SYS" for k, c in enumerate(ln.split("\t")[1:5]))
                     + "\t0-15\t0" for ln in text.splitlines())
    t = parse_nvidia_smi(text, "p.txt", "p", "80").topology()
    assert set(t.switches) >= {"cpu0", "cpu1"}


def test_nics_attach_to_their_nearest_gpus():
    m = parse_nvidia_smi(_nv_matrix(4, "NV12", nics=2), "n.txt", "n", "80")
    assert [n.gpus for n in m.nics] == [("g0", "g1"), ("g2", "g3")]


@pytest.mark.parametrize("text, expect", [
    ("hello\n", "no matrix header"),
    (_nv_matrix(4, "NV12").replace("GPU3\tNV12\tNV12\tNV12\tX", "GPU3\tNV12\tNV12\tX"),
     "the rows and columns disagree"),
    ("\n".join(_nv_matrix(4, "NV12").splitlines()[:4]) + "\n", "no row for column GPU3"),
    (_nv_matrix(4, "NV12").replace("GPU1\tNV12", "GPU1\tQPI"), "unknown link code 'QPI'"),
    (_nv_matrix(4, "NV7"), "cannot tell the GPU generation from 7 NVLinks per GPU"),
    (_nv_matrix(2, "NV1").replace("GPU1\tNV1\tX", "GPU1\tNV1\tNV1"), "expected X on the diagonal"),
])
def test_bad_nvidia_smi_is_one_spec_error(text, expect):
    with pytest.raises(SpecError) as exc:
        parse_nvidia_smi(text, "bad.txt", "bad", None)
    assert expect in str(exc.value) and str(exc.value).startswith("bad.txt")


def _rocm(n: int, cell: str) -> str:
    head = "=== Link Type between two GPUs ===\n       " + "  ".join(f"GPU{i}" for i in range(n))
    rows = [f"GPU{i}   " + "  ".join("0" if i == j else cell for j in range(n)) for i in range(n)]
    return head + "\n" + "\n".join(rows) + "\n"


def test_rocm_eight_xgmi_is_mi300x():
    m = parse_rocm_smi(_rocm(8, "XGMI"), "r.txt", "r", None)
    assert {k.bandwidth_Bps for k in m.topology().links} == {64 * GB}
    assert any("gfx942" in a for a in m.report.assumed)


@pytest.mark.parametrize("text, arch, expect", [
    (_rocm(4, "XGMI"), None, "cannot tell the GPU generation"),
    (_rocm(4, "XGMI"), "gfx1100", "unknown GPU generation 'gfx1100'"),
    (_rocm(4, "NVLINK"), "gfx90a", "unknown link type 'NVLINK'"),
    ("nothing here\n", None, "no 'Link Type between two GPUs' table"),
])
def test_bad_rocm_smi_is_one_spec_error(text, arch, expect):
    with pytest.raises(SpecError) as exc:
        parse_rocm_smi(text, "bad.txt", "bad", arch)
    assert expect in str(exc.value)
