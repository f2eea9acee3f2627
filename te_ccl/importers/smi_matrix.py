"""``nvidia-smi topo -m`` and ``rocm-smi --showtopo`` text → a :class:`Machine`.

Both print a GPU-by-GPU matrix of how each pair is connected. ``nvidia-smi`` writes
``NV#`` (a bonded set of # NVLinks), ``PIX``/``PXB`` (through PCIe bridges),
``PHB``/``NODE`` (through a host bridge) or ``SYS`` (across the CPU interconnect), plus
NIC columns; ``rocm-smi`` writes ``XGMI`` or ``PCIE`` in its "Link Type between two
GPUs" table and the GPUs' NUMA nodes.

Neither names the GPU generation, so ``arch`` must be given unless it can be told
from the links: 18, 12, 6 or 4 NVLinks per GPU are H100, A100, V100 and P100; eight
GPUs all joined by xGMI are MI300X. When every pair shows the same ``NV#`` and that
many links to each of the others would exceed a GPU's 18, the GPUs hang on an NVSwitch.

Output saved from a terminal keeps its escape codes (``nvidia-smi`` underlines the
header row); they are removed before parsing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from te_ccl.errors import SpecError
from te_ccl.importers import hardware as hw
from te_ccl.importers.machine import Machine, Nic, switch_node
from te_ccl.topology.model import Link

__all__ = ["read_smi", "parse_nvidia_smi", "parse_rocm_smi", "strip_terminal_codes"]

# Terminal escape sequences: CSI (ESC [ parameters final, the 8-bit form too), OSC
# (ESC ] text BEL or ESC \, kept to one line) and two-byte escapes such as ESC ( B.
_TERMINAL_CODE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]"
                            r"|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[()*+].|\x1b[@-_]")
_NV_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")  # nearest first; SOC: old SYS
_NV_RE = re.compile(r"^NV([1-9]\d*)$")  # NV0 is no link
_MAX_LINKS_PER_GPU = 18


@dataclass
class _Matrix:
    """Square part (``cols`` × ``cols``) of a printed matrix, with the line of each row."""

    cols: list[str]
    cells: dict[str, list[str]]
    lines: dict[str, int]
    extra: dict[str, list[str]]


def strip_terminal_codes(text: str) -> tuple[str, int]:
    """``text`` without terminal escape codes, and how many there were.

    >>> strip_terminal_codes("\\t\\x1b[4mGPU0\\tGPU1\\x1b[0m")
    ('\\tGPU0\\tGPU1', 2)
    """
    return _TERMINAL_CODE.subn("", text)


def _report_codes(machine: Machine, codes: int) -> None:
    if codes:
        machine.report.add("ignored", f"{codes} terminal escape codes (colour, underline: "
                                      "the output was saved from a terminal)")


def _read_matrix(lines: list[str], start: int, file: str, *, stop_words: tuple[str, ...]
                 ) -> tuple[_Matrix, int]:
    """Parse the matrix whose header is ``lines[start]``; return it and the next line index."""
    header = lines[start].split()
    cols = []
    for tok in header:
        if tok in stop_words:
            break
        cols.append(tok)
    if len(set(cols)) != len(cols):
        raise SpecError("header names a column twice; expected distinct device names",
                        file=file, line=start + 1)
    cells: dict[str, list[str]] = {}
    where: dict[str, int] = {}
    extra: dict[str, list[str]] = {}
    i = start + 1
    while i < len(lines):
        toks = lines[i].split()
        if not toks or toks[0] not in cols:
            if toks and toks[0].startswith("GPU") and toks[0][3:].isdigit():
                raise SpecError(f"row {toks[0]} has no column; expected the rows and columns "
                                "to name the same devices", file=file, line=i + 1)
            break
        name = toks[0]
        if name in cells:
            raise SpecError(f"row {name} appears twice", file=file, line=i + 1)
        row = toks[1:]
        if len(row) < len(cols):
            raise SpecError(f"row {name} has {len(row)} entries, expected {len(cols)} (one per "
                            "column)", file=file, line=i + 1)
        cells[name], extra[name], where[name] = row[:len(cols)], row[len(cols):], i + 1
        i += 1
    for c in cols:
        if c.startswith("GPU") and c not in cells:
            raise SpecError(f"no row for column {c}; expected one row per GPU column",
                            file=file, line=start + 1)
    return _Matrix(cols, cells, where, extra), i


def _socket_tree(machine: Machine, socket_of: dict[str, str], group_of: dict[str, str | None],
               pcie: hw.Figure) -> None:
    """GPUs on PCIe switches (``group_of``) or straight on their socket; sockets joined."""
    lat = hw.PCIE_LATENCY.value
    sockets = sorted(set(socket_of.values()))
    groups = sorted({g for g in group_of.values() if g})
    machine.switches += [switch_node(s) for s in sockets + groups]
    for g in machine.gpus:
        machine.add_both(g, group_of.get(g) or socket_of[g], pcie.value, lat)
    for grp in groups:
        sock = next(socket_of[g] for g in machine.gpus if group_of.get(g) == grp)
        machine.add_both(grp, sock, pcie.value, lat)
    smp = hw.smp_link(None)
    for i, a in enumerate(sockets):
        for b in sockets[i + 1:]:
            machine.add_both(a, b, smp.value, lat)
    r = machine.report
    r.add("read", f"PCIe: {len(sockets)} CPU sockets, {len(groups)} PCIe switches shared by GPUs")
    r.add("assumed", f"every PCIe link: {pcie.source}")
    if len(sockets) > 1:
        r.add("assumed", f"CPU-to-CPU: {smp.source}")
    r.add("assumed", hw.PCIE_LATENCY.source)


def _union(pairs: list[tuple[str, str]], items: list[str]) -> dict[str, str]:
    parent = {x: x for x in items}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    return {x: find(x) for x in items}


def parse_nvidia_smi(text: str, file: str, name: str, arch: str | None) -> Machine:
    """Parse ``nvidia-smi topo -m`` output."""
    text, codes = strip_terminal_codes(text)
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"]
                  and len(ln.split()) > 1 and not ln.split()[1].startswith("X")), None)
    if start is None:
        raise SpecError("no matrix header (a line starting with GPU0 GPU1 …); expected "
                        "`nvidia-smi topo -m` output", file=file, line=1)
    m, _ = _read_matrix(lines, start, file, stop_words=("CPU", "NUMA", "GPU NUMA"))
    gpu_cols = [c for c in m.cols if re.fullmatch(r"GPU\d+", c)]
    if len(gpu_cols) < 2:
        raise SpecError(f"expected at least 2 GPU columns, found {len(gpu_cols)}",
                        file=file, line=start + 1)
    nic_cols = [c for c in m.cols if c not in gpu_cols]
    machine = Machine(name, file, source=f"imported from {Path(file).name} "
                                         "(nvidia-smi topo -m)")
    _report_codes(machine, codes)
    machine.gpus = [f"g{c[3:]}" for c in gpu_cols]
    gname = dict(zip(gpu_cols, machine.gpus, strict=True))
    code: dict[tuple[str, str], str] = {}
    for row in gpu_cols:
        for col, cell in zip(m.cols, m.cells[row], strict=True):
            if col == row:
                if cell != "X":
                    raise SpecError(f"{row}/{col}: expected X on the diagonal, got {cell!r}",
                                    file=file, line=m.lines[row])
                continue
            if cell == "X":
                raise SpecError(f"{row}/{col}: X off the diagonal; expected one entry per "
                                "column (the rows and columns disagree)", file=file,
                                line=m.lines[row])
            if cell not in _NV_CODES and not _NV_RE.match(cell):
                raise SpecError(f"{row}/{col}: unknown link code {cell!r}; expected X, NV#, "
                                "PIX, PXB, PHB, NODE or SYS", file=file, line=m.lines[row])
            code[(row, col)] = cell
    nv = {(gname[a], gname[b]): int(_NV_RE.match(c).group(1)) for (a, b), c in code.items()
          if b in gname and _NV_RE.match(c)}
    r = machine.report
    r.add("read", f"nvidia-smi topo -m: {len(gpu_cols)} GPUs, {len(nic_cols)} NICs, "
                  f"{len(nv)} GPU pairs with NVLink")
    counts = set(nv.values())
    n = len(gpu_cols)
    switched = (len(nv) == n * (n - 1) and len(counts) == 1
                and next(iter(counts)) * (n - 1) > _MAX_LINKS_PER_GPU)
    per_gpu = next(iter(counts)) if switched else max(
        (sum(v for (a, _), v in nv.items() if a == g) for g in machine.gpus), default=0)
    if nv:
        if arch is None:
            arch = hw.nvlinks_to_sm(per_gpu)
            if arch is None:
                raise SpecError(f"cannot tell the GPU generation from {per_gpu} NVLinks per GPU; "
                                "expected --arch SM (e.g. 80 for A100, 90 for H100)", file=file,
                                line=start + 1)
            r.add("assumed", f"GPU generation sm {arch}, told from {per_gpu} NVLinks per GPU "
                             "(18: H100, 12: A100, 6: V100, 4: P100); give --arch to override")
        try:
            per_link = hw.nvlink_per_link(arch)
        except hw.UnknownGeneration as e:
            raise SpecError(str(e), key="--arch") from None
        r.add("assumed", f"NVLink per link: {per_link.source}")
        r.add("assumed", hw.NVLINK_LATENCY.source)
        lat = hw.NVLINK_LATENCY.value
        if switched:
            machine.switches.append(switch_node("nvswitch", copy=True))
            for g in machine.gpus:
                machine.add_both(g, "nvswitch", per_gpu * per_link.value, lat)
            r.add("assumed", f"every pair shows NV{per_gpu}, more than {_MAX_LINKS_PER_GPU} "
                             "links per GPU in all: the GPUs hang on NVSwitch, modelled as one "
                             "non-blocking switch that can multicast but not reduce")
        else:
            for (a, b), k in nv.items():
                machine.links.append(Link(a, b, k * per_link.value, lat))
    pcie = hw.pcie_default(arch)
    if not (nv and machine.gpus_joined()):
        gcode = {(gname[a], gname[b]): c for (a, b), c in code.items() if b in gname}
        socket = _union([p for p, c in gcode.items() if c in _NV_CODES
                         and c not in ("SYS", "SOC")], machine.gpus)
        switch = _union([p for p, c in gcode.items() if c in ("PIX", "PXB")], machine.gpus)
        shared = {s for s in switch.values() if list(switch.values()).count(s) > 1}
        sock_names = {s: f"cpu{i}" for i, s in enumerate(
            sorted(set(socket.values()), key=machine.gpus.index))}
        _socket_tree(machine, {g: sock_names[socket[g]] for g in machine.gpus},
                   {g: f"pcisw.{switch[g]}" if switch[g] in shared else None
                    for g in machine.gpus}, pcie)
    else:
        r.add("ignored", "PCIe paths between GPUs: NVLink joins every GPU")
    for col in nic_cols:
        ranks = {g: _NV_CODES.index(code[(row, col)]) for row, g in gname.items()
                 if code.get((row, col)) in _NV_CODES}
        if not ranks:
            continue
        best = min(ranks.values())
        machine.nics.append(Nic(col, pcie.value, tuple(g for g, v in ranks.items() if v == best),
                                pcie.value))
    if machine.nics:
        r.add("assumed", f"NIC speed: not in the matrix; each NIC is taken at {pcie.source}")
    return machine


_NUMA_RE = re.compile(r"^GPU\[?(\d+)\]?\s*:\s*\(Topology\) Numa Node:\s*(-?\d+)")


def parse_rocm_smi(text: str, file: str, name: str, arch: str | None) -> Machine:
    """Parse ``rocm-smi --showtopo`` output (its "Link Type between two GPUs" table)."""
    text, codes = strip_terminal_codes(text)
    lines = text.splitlines()
    title = next((i for i, ln in enumerate(lines) if "Link Type between two GPUs" in ln), None)
    if title is None:
        raise SpecError("no 'Link Type between two GPUs' table; expected `rocm-smi "
                        "--showtopo` output", file=file, line=1)
    start = next((i for i in range(title + 1, len(lines)) if lines[i].split()), None)
    if start is None or lines[start].split()[0] != "GPU0":
        raise SpecError("expected a header line GPU0 GPU1 … under 'Link Type between two "
                        "GPUs'", file=file, line=(start or title) + 1)
    m, _ = _read_matrix(lines, start, file, stop_words=())
    if len(m.cols) < 2:
        raise SpecError(f"expected at least 2 GPU columns, found {len(m.cols)}", file=file,
                        line=start + 1)
    machine = Machine(name, file, source=f"imported from {Path(file).name} "
                                         "(rocm-smi --showtopo)")
    _report_codes(machine, codes)
    machine.gpus = [f"g{c[3:]}" if c[3:].isdigit() else c for c in m.cols]
    gname = dict(zip(m.cols, machine.gpus, strict=True))
    xgmi: list[tuple[str, str]] = []
    for row in m.cols:
        for col, cell in zip(m.cols, m.cells[row], strict=True):
            if col == row:
                if cell not in ("0", "X"):
                    raise SpecError(f"{row}/{col}: expected 0 on the diagonal, got {cell!r}",
                                    file=file, line=m.lines[row])
            elif cell.upper() == "XGMI":
                xgmi.append((gname[row], gname[col]))
            elif cell.upper() != "PCIE":
                raise SpecError(f"{row}/{col}: unknown link type {cell!r}; expected XGMI or PCIE",
                                file=file, line=m.lines[row])
    r = machine.report
    n = len(m.cols)
    r.add("read", f"rocm-smi --showtopo: {n} GPUs, {len(xgmi)} directed xGMI pairs")
    if xgmi:
        if arch is None:
            if len(xgmi) != n * (n - 1) or n != 8:
                raise SpecError("cannot tell the GPU generation from this table; expected "
                                "--arch GFX (e.g. gfx90a for MI250, gfx942 for MI300X)",
                                file=file, line=title + 1)
            arch = "gfx942"
            r.add("assumed", "GPU generation gfx942 (MI300X): eight GPUs all joined by xGMI; "
                             "give --arch to override")
        try:
            per_link = hw.xgmi_per_link(arch)
        except hw.UnknownGeneration as e:
            raise SpecError(str(e), key="--arch") from None
        r.add("assumed", f"xGMI per link: {per_link.source}")
        r.add("assumed", "one xGMI link per XGMI pair (the table does not give link counts)")
        r.add("assumed", hw.NVLINK_LATENCY.source)
        for a, b in xgmi:
            machine.links.append(Link(a, b, per_link.value, hw.NVLINK_LATENCY.value))
    if not (xgmi and machine.gpus_joined()):
        numa = {}
        for ln in lines:
            mm = _NUMA_RE.match(ln.strip())
            if mm and f"g{mm.group(1)}" in machine.gpus:
                numa[f"g{mm.group(1)}"] = f"cpu{max(int(mm.group(2)), 0)}"
        _socket_tree(machine, {g: numa.get(g, "cpu0") for g in machine.gpus},
                   {g: None for g in machine.gpus}, hw.pcie_default(arch))
    else:
        r.add("ignored", "PCIe paths between GPUs: xGMI joins every GPU")
    return machine


def read_smi(path: Path, label: str, kind: str, arch: str | None) -> Machine:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError("not UTF-8 text; expected nvidia-smi or rocm-smi output",
                        file=label) from None
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror}", file=label) from None
    parse = parse_rocm_smi if kind == "rocm-smi" else parse_nvidia_smi
    return parse(text, label, path.stem, arch)
