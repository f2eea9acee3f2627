"""What a dump does not say: bandwidth per link by GPU generation, PCIe lane rates, α.

Every figure carries the public source it comes from, and the importers copy that
source into their sanity report whenever they use the figure. Bandwidths are per
direction (as the rest of teccl counts them): vendors often quote NVLink and xGMI
as "bidirectional", which is twice the per-direction figure.

>>> nvlink_per_link("80").bandwidth_Bps, xgmi_per_link("gfx942").bandwidth_Bps
(25000000000.0, 64000000000.0)
>>> round(pcie_Bps("16.0 GT/s PCIe", 16) / 1e9, 2)
31.51
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "Figure", "UnknownGeneration", "nvlink_per_link", "xgmi_per_link", "pcie_Bps", "pcie_default", "smp_link",
    "NVLINK_LATENCY", "NET_LATENCY", "PCIE_LATENCY", "nvlinks_to_sm", "GPU_CLASSES",
    "NIC_CLASS_PREFIX", "BRIDGE_CLASS_PREFIX", "NVSWITCH_CLASS",
]


@dataclass(frozen=True)
class Figure:
    """A number the dump does not carry, and where it comes from."""

    value: float
    source: str

    @property
    def bandwidth_Bps(self) -> float:
        return self.value


_GB = 1e9

# CUDA compute capability (NCCL's ``sm`` attribute) -> NVLink per link, per direction.
_NVLINK: dict[str, tuple[float, str]] = {
    "60": (20 * _GB, "P100 (NVLink 1): 4 links, 160 GB/s bidirectional = 20 GB/s per "
                     "direction per link (NVIDIA Tesla P100 whitepaper)"),
    "70": (25 * _GB, "V100 (NVLink 2): 6 links, 300 GB/s bidirectional = 25 GB/s per "
                     "direction per link (NVIDIA Tesla V100 whitepaper)"),
    "75": (25 * _GB, "Turing (NVLink 2 bridge): 25 GB/s per direction per link "
                     "(NVIDIA Turing architecture whitepaper)"),
    "80": (25 * _GB, "A100 (NVLink 3): 12 links, 600 GB/s bidirectional = 25 GB/s per "
                     "direction per link (NVIDIA A100 Tensor Core GPU architecture whitepaper)"),
    "86": (14.0625 * _GB, "GA102 (NVLink 3 bridge): 4 links, 112.5 GB/s bidirectional = "
                          "14.0625 GB/s per direction per link (NVIDIA A40 data sheet)"),
    "90": (25 * _GB, "H100 (NVLink 4): 18 links, 900 GB/s bidirectional = 25 GB/s per "
                     "direction per link (NVIDIA H100 Tensor Core GPU architecture whitepaper)"),
    "100": (50 * _GB, "B200/GB200 (NVLink 5): 18 links, 1.8 TB/s bidirectional = 50 GB/s "
                      "per direction per link (NVIDIA Blackwell architecture technical brief)"),
}

# AMD gfx target (RCCL's ``gcn`` attribute; "910" is its numeric spelling of gfx90a).
_XGMI: dict[str, tuple[float, str]] = {
    "gfx906": (50 * _GB, "MI50/MI60 (gfx906): 2 Infinity Fabric links, 200 GB/s peer "
                         "bidirectional = 50 GB/s per direction per link (AMD Radeon Instinct "
                         "MI50/MI60 launch announcement)"),
    "gfx908": (46 * _GB, "MI100 (gfx908): 3 Infinity Fabric links, 276 GB/s peer "
                         "bidirectional = 46 GB/s per direction per link (AMD Instinct MI100 "
                         "data sheet)"),
    "gfx90a": (50 * _GB, "MI250/MI210 (gfx90a): 50 GB/s per direction per Infinity Fabric "
                         "link (ROCm docs, AMD Instinct MI250 microarchitecture)"),
    "gfx942": (64 * _GB, "MI300X (gfx942): 7 Infinity Fabric links, 896 GB/s peer "
                         "bidirectional = 64 GB/s per direction per link (AMD Instinct MI300X "
                         "data sheet)"),
}
# RCCL writes some targets as bare numbers ("910" is gfx90a); gfx940 and gfx941 are the
# early MI300 targets, of the same Infinity Fabric generation as gfx942.
_GCN_ALIASES = {"906": "gfx906", "908": "gfx908", "910": "gfx90a", "940": "gfx942",
                "941": "gfx942", "942": "gfx942", "gfx940": "gfx942", "gfx941": "gfx942"}

NVLINK_LATENCY = Figure(0.7e-6, "alpha 0.7 us per NVLink/xGMI hop: the TE-CCL NDv2 model's "
                                "value, not measured here (fit it with `teccl topo calibrate`)")
PCIE_LATENCY = Figure(1.0e-6, "alpha 1 us per PCIe hop: our assumption, not measured here "
                              "(fit it with `teccl topo calibrate`)")
NET_LATENCY = Figure(1.3e-6, "alpha 1.3 us per network hop: the TE-CCL NDv2 model's "
                             "InfiniBand value, not measured here")

# CPU-to-CPU (SMP) interconnect, as NCCL's topology code rates it.
_SMP = {"GenuineIntel": (10 * _GB, "Intel UPI between sockets: 10 GB/s, NCCL's rating of "
                                    "Skylake-and-later QPI/UPI (src/graph/topo.h)"),
        "AuthenticAMD": (16 * _GB, "AMD Infinity Fabric between sockets: 16 GB/s, NCCL's "
                                   "rating of AMD CPUs (src/graph/topo.h)")}
_SMP_DEFAULT = (6 * _GB, "SMP interconnect of an unknown CPU: 6 GB/s, NCCL's most "
                         "conservative CPU-to-CPU rating (src/graph/topo.h)")

# PCI class codes (PCI SIG class code table): 03xx display/3D, 12xx processing accelerator.
GPU_CLASSES = ("0x0300", "0x0302", "0x0380", "0x1200")
NIC_CLASS_PREFIX = "0x02"
BRIDGE_CLASS_PREFIX = "0x0604"
NVSWITCH_CLASS = "0x0680"

# PCIe per-lane rate (GT/s) -> payload bytes/s per lane, per direction, after line coding:
# 8b/10b for 2.5 and 5 GT/s, 128b/130b for 8-32 GT/s, 242B/256B FLIT for 64 GT/s
# (PCI-SIG base specifications 1.0-6.0).
_PCIE_LANE = {2.5: 2.5e9 * 8 / 10 / 8, 5.0: 5e9 * 8 / 10 / 8, 8.0: 8e9 * 128 / 130 / 8,
              16.0: 16e9 * 128 / 130 / 8, 32.0: 32e9 * 128 / 130 / 8,
              64.0: 64e9 * 242 / 256 / 8}
_SPEED_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")


def canonical_gcn(gcn: str) -> str:
    """RCCL spells gfx targets as ``gfx942`` or numerically (``910`` = gfx90a)."""
    gcn = gcn.strip().lower()
    return _GCN_ALIASES.get(gcn, gcn)


class UnknownGeneration(ValueError):
    """A GPU generation without a known link rate; the message names the known ones."""


def nvlink_per_link(sm: str | None) -> Figure:
    """NVLink bandwidth per link per direction of compute capability ``sm``
    (:class:`UnknownGeneration` for one without a known NVLink rate)."""
    return _figure(_NVLINK, str(sm).strip(), sm, "NVLink", ", ".join(f"sm {k}" for k in _NVLINK))


def xgmi_per_link(gcn: str) -> Figure:
    """xGMI (Infinity Fabric) bandwidth per link per direction of gfx target ``gcn``
    (:class:`UnknownGeneration` for one without a known xGMI rate)."""
    return _figure(_XGMI, canonical_gcn(gcn), gcn, "xGMI", ", ".join(_XGMI))


def _figure(table: dict[str, tuple[float, str]], key: str, given: str, fabric: str,
            known: str) -> Figure:
    if key not in table:
        raise UnknownGeneration(f"unknown GPU generation {given!r} for {fabric}; expected one "
                                f"of {known}")
    return Figure(*table[key])


def pcie_Bps(link_speed: str, link_width: int) -> float | None:
    """Bytes/s per direction of a PCIe link (``"16.0 GT/s PCIe"``, 16 lanes); None if unknown."""
    m = _SPEED_RE.match(link_speed or "")
    if not m or link_width <= 0:
        return None
    lane = _PCIE_LANE.get(float(m.group(1)))
    return None if lane is None else lane * link_width


def pcie_default(arch: str | None) -> Figure:
    """A PCIe x16 link of the generation a GPU of ``arch`` ships with, when the dump is silent
    (Gen4, and the report says it is a guess, for a generation not in the table)."""
    known = {"60": 3, "70": 3, "75": 3, "80": 4, "86": 4, "89": 4, "90": 5, "100": 5,
             "gfx906": 4, "gfx908": 4, "gfx90a": 4, "gfx942": 5}.get(canonical_gcn(arch or ""))
    gen = known or 4
    rate = {3: 8.0, 4: 16.0, 5: 32.0}[gen]
    why = ("the link the GPU generation ships with" if known else
           "assumed, the GPU generation not being known")
    return Figure(_PCIE_LANE[rate] * 16, f"PCIe Gen{gen} x16 ({rate:g} GT/s, 128b/130b): "
                                         f"{why}; the dump gives no PCIe speed")


def smp_link(vendor: str | None) -> Figure:
    bw, src = _SMP.get(vendor or "", _SMP_DEFAULT)
    return Figure(bw, src)


# NVLinks per GPU -> generation, for dumps that say only "NV#" (nvidia-smi topo -m).
_LINKS_TO_SM = {18: "90", 12: "80", 6: "70", 4: "60"}


def nvlinks_to_sm(links_per_gpu: int) -> str | None:
    """The generation whose GPUs have ``links_per_gpu`` NVLinks (None if no match)."""
    return _LINKS_TO_SM.get(links_per_gpu)
