"""Calibration: nccl-tests tables made from a known α-β plus noise give that α-β back."""

from __future__ import annotations

import math

import numpy as np
import pytest

from te_ccl.errors import SpecError
from te_ccl.spec.topology import load_topology
from te_ccl.topology.calibrate import apply_fit, cost_terms, fit_table
from te_ccl.topology.nccl_tests import parse_nccl_tests

_ROW_OP = {"allreduce": ("sum", -1), "allgather": ("none", -1), "reducescatter": ("sum", -1),
           "alltoall": ("none", -1), "sendrecv": ("sum", -1)}
_BUS = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
        "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
        "sendrecv": lambda n: 1.0}


def nccl_tests_output(kind: str, n: int, alpha: float, beta: float, *, algorithm: str = "",
                      noise: float = 0.03, seed: int = 0, wrong_row: int | None = None) -> str:
    """nccl-tests output as its *_perf binaries print it, timed by an α-β model plus noise."""
    rng = np.random.default_rng(seed)
    steps, factor = cost_terms(kind, algorithm or {"alltoall": "direct", "sendrecv": "p2p"}
                               .get(kind, "ring"), n)
    out = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: "
           "5 iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    out += [f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on     node-0 device {r:2d} [0x{r:02x}] "
            "NVIDIA A100-SXM4-80GB" for r in range(n)]
    out += ["#",
            "#                                                              out-of-place       "
            "                in-place          ",
            "#       size         count      type   redop    root     time   algbw   busbw "
            "#wrong     time   algbw   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)   "
            "         (us)  (GB/s)  (GB/s)       "]
    redop, root = _ROW_OP[kind]
    for i in range(3, 31):
        size = 2 ** i
        cells = []
        for _ in range(2):
            t = (steps * alpha + factor * size / beta) * (1 + noise * rng.standard_normal())
            algbw = size / t / 1e9
            wrong = 3 if wrong_row == i else 0
            cells.append(f"{t * 1e6:8.2f} {algbw:7.2f} {algbw * _BUS[kind](n):7.2f} {wrong:6d}")
        out.append(f"{size:12d} {size // 4:13d} {'float':>9} {redop:>7} {root:7d} "
                   f"{cells[0]}  {cells[1]}")
    out += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 123.456 ", "#"]
    return "\n".join(out) + "\n"


CASES = [("allreduce", "ring", 8, 2e-6, 240e9), ("allreduce", "tree", 16, 5e-6, 40e9),
         ("allgather", "ring", 8, 1.5e-6, 200e9), ("reducescatter", "ring", 4, 3e-6, 90e9),
         ("alltoall", "direct", 16, 20e-6, 45e9), ("sendrecv", "p2p", 2, 8e-6, 23e9)]


@pytest.mark.parametrize("kind, algo, n, alpha, beta", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_fit_recovers_alpha_beta_within_5_percent(kind, algo, n, alpha, beta, seed):
    text = nccl_tests_output(kind, n, alpha, beta, algorithm=algo, seed=seed)
    table = parse_nccl_tests(text, f"{kind}_perf.txt")
    assert table.nranks == n and len(table.samples) == 56
    fit = fit_table(table, kind, algo, n)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.05)
    assert fit.beta_Bps == pytest.approx(beta, rel=0.05)
    assert fit.rms_rel < 0.06


def test_collective_from_file_name_and_skipped_rows():
    text = nccl_tests_output("allgather", 8, 2e-6, 100e9, wrong_row=10)
    table = parse_nccl_tests(text, "runs/all_gather_perf.out")
    assert table.collective == "allgather" and len(table.samples) == 54
    assert table.skipped and "wrong values" in table.skipped[0]


def test_single_node_fit_sets_the_nvswitch_links():
    topo = load_topology("dgx-a100")
    table = parse_nccl_tests(nccl_tests_output("allreduce", 8, 2e-6, 240e9, noise=0.0), "ar.txt")
    fitted, applied = apply_fit(topo, fit_table(table, "allreduce", "ring", 8), 8)
    assert applied.links == 16 and applied.kind == "gpu-switch"
    for k in fitted.links:  # a ring step is GPU -> NVSwitch -> GPU: two links share alpha
        assert k.bandwidth_Bps == pytest.approx(240e9, rel=1e-3)
        assert k.latency_s == pytest.approx(1e-6, rel=1e-2)


def test_multi_node_fit_sets_only_the_nic_links():
    topo = load_topology("hgx-h100x2")
    table = parse_nccl_tests(nccl_tests_output("sendrecv", 16, 5e-6, 45e9, noise=0.0), "sr.txt")
    fitted, applied = apply_fit(topo, fit_table(table, "sendrecv", "p2p", 16), 16)
    nic = [k for k in fitted.links if k.src.startswith("rail") or k.dst.startswith("rail")]
    nvl = [k for k in fitted.links if k not in nic]
    assert applied.links == len(nic) == 32
    assert all(k.bandwidth_Bps == pytest.approx(45e9, rel=1e-3) for k in nic)
    # the longest ring step crosses two NVLinks (0.7 us each) and two NIC links
    assert all(k.latency_s == pytest.approx((5e-6 - 1.4e-6) / 2, rel=1e-2) for k in nic)
    assert all(k.bandwidth_Bps == 450e9 and k.latency_s == pytest.approx(0.7e-6) for k in nvl)


@pytest.mark.parametrize("text, expect", [
    ("hello\n", "no nccl-tests header"),
    ("#  size count type time algbw busbw\n  8 2 float 1.0\n", "row has 4 columns, expected 6"),
    ("#  size count type time algbw busbw\n  8 2 float fast 1 1\n", "expected a number"),
    ("#  size count type time algbw busbw\n", "no measurements"),
])
def test_bad_tables_are_one_spec_error(text, expect):
    with pytest.raises(SpecError) as exc:
        parse_nccl_tests(text, "t.txt")
    assert expect in str(exc.value) and str(exc.value).startswith("t.txt")


def test_flat_times_cannot_give_a_bandwidth():
    table = parse_nccl_tests("#  size count type time algbw busbw\n  8 2 float 5.0 0 0\n"
                             "  1048576 2 float 5.0 0 0\n", "flat.txt")
    with pytest.raises(SpecError, match="do not grow with size"):
        fit_table(table, "sendrecv", "p2p", 2)


def test_cli_calibrate_writes_a_loadable_topology(teccl, tmp_path):
    meas = tmp_path / "all_reduce_perf.txt"
    meas.write_text(nccl_tests_output("allreduce", 8, 3e-6, 220e9, seed=3))
    out = tmp_path / "cal.yaml"
    code, _, err = teccl("topo", "calibrate", "dgx-h100", str(meas), "-o", str(out))
    assert code == 0 and "residuals" in err
    t = load_topology(str(out))
    assert {round(k.bandwidth_Bps / 1e9) for k in t.links} <= set(range(209, 232))
    assert "# Fits" in out.read_text()
    assert math.isclose(t.links[0].latency_s, 1.5e-6, rel_tol=0.05)


def test_cli_calibrate_bad_input_exit_2(teccl, tmp_path):
    meas = tmp_path / "numbers.txt"
    meas.write_text(nccl_tests_output("allreduce", 8, 3e-6, 220e9))
    out = tmp_path / "cal.yaml"
    code, _, err = teccl("topo", "calibrate", "dgx-h100", str(meas), "-o", str(out))
    assert code == 2 and "cannot tell which collective" in err and not out.exists()
    code, _, err = teccl("topo", "calibrate", "dgx-h100", str(meas), "-c", "gossip")
    assert code == 2 and "--collective" in err
    code, _, err = teccl("topo", "calibrate", "dgx-a100", str(meas), "-c", "alltoall",
                         "--algorithm", "ring")
    assert code == 2 and "no α-β model" in err
