"""Import a real machine from what its owner already has: a topology dump.

Formats: NCCL/RCCL topology XML (:mod:`.nccl_xml`), ``nvidia-smi topo -m`` and
``rocm-smi --showtopo`` text (:mod:`.smi_matrix`). :func:`import_file` sniffs the
format, reads one node, and with ``nodes > 1`` composes a cluster of copies joined
through their NICs (:mod:`.cluster`). Every import carries a sanity report of what
was read, assumed and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from te_ccl.errors import SpecError
from te_ccl.importers.machine import ImportReport, Machine
from te_ccl.topology.model import Topology

__all__ = ["ImportOptions", "Imported", "import_file", "sniff_format", "IMPORT_SUFFIXES"]

IMPORT_SUFFIXES = (".xml", ".txt")
_SNIFF_BYTES = 4096


@dataclass(frozen=True)
class ImportOptions:
    """``arch``: GPU generation (``90``, ``gfx942``), where the dump does not name it or
    names it wrongly; ``nvswitch_links``: NVLinks per GPU to an NVSwitch, and ``gpus``:
    how many GPUs, for XML that lists none;
    ``nic_Bps``: the network rate of every NIC port (dumps often do not carry it);
    ``nodes``/``fabric``/``spine_Bps``: compose a cluster of that many copies."""

    arch: str | None = None
    nvswitch_links: int | None = None
    gpus: int | None = None
    nic_Bps: float | None = None
    nodes: int = 1
    fabric: str = "rail"
    spine_Bps: float | None = None


@dataclass(frozen=True)
class Imported:
    topology: Topology
    report: ImportReport
    format: str


def sniff_format(path: Path) -> str | None:
    """``nccl-xml``, ``nvidia-smi``, ``rocm-smi`` or None, from the first bytes of ``path``."""
    from te_ccl.importers.smi_matrix import strip_terminal_codes

    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return None
    text, _ = strip_terminal_codes(head.decode("utf-8", errors="replace"))
    text = text.lstrip("\ufeff \t\r\n")
    if text.startswith("<"):
        return "nccl-xml"
    if "between two GPUs" in text:
        return "rocm-smi"
    if "GPU0" in text and ("Legend" in text or "\tX" in text or " X " in text):
        return "nvidia-smi"
    return None


def read_machine(path: Path, label: str, options: ImportOptions) -> tuple[Machine, str]:
    """One node read from ``path`` (``label`` names it in errors) and the format's name."""
    from te_ccl.importers import nccl_xml, smi_matrix
    from te_ccl.outputs import check_input_file

    check_input_file(path)  # a FIFO's open would block, a device read without end
    kind = sniff_format(path)
    if kind is None:
        if not path.exists():
            raise SpecError("no such file", file=label)
        raise SpecError("not a topology dump; expected NCCL topology XML, `nvidia-smi topo "
                        "-m` or `rocm-smi --showtopo` output", file=label, line=1)
    if kind == "nccl-xml":
        return nccl_xml.read_nccl_xml(path, label, options.arch, options.nvswitch_links,
                                      options.gpus), kind
    for key, value in (("--nvswitch-links", options.nvswitch_links), ("--gpus", options.gpus)):
        if value is not None:
            raise SpecError(f"applies to NCCL topology XML only; {label} is {kind} output",
                            key=key)
    return smi_matrix.read_smi(path, label, kind, options.arch), kind


def import_file(path: str | Path, options: ImportOptions = ImportOptions(),
                label: str | None = None) -> Imported:
    """Read the dump at ``path`` into a validated topology and its sanity report."""
    from te_ccl.importers.cluster import compose

    if options.nodes < 1:
        raise SpecError(f"expected at least 1 node, got {options.nodes}", key="--nodes")
    path = Path(path)
    machine, kind = read_machine(path, label or str(path), options)
    if options.nic_Bps:
        machine.nics = [replace(n, bandwidth_Bps=options.nic_Bps) for n in machine.nics]
        machine.report.add("assumed", f"given: every NIC port at {options.nic_Bps * 8 / 1e9:g} "
                                      "Gb/s (--nic-bw)")
    if options.nodes > 1:
        topo = compose(machine, options.nodes, options.fabric, options.spine_Bps)
    else:
        topo = machine.topology()
    return Imported(topo, machine.report, kind)
