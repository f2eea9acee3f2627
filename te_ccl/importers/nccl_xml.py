"""NCCL / RCCL topology XML (``NCCL_TOPO_DUMP_FILE``, ``NCCL_TOPO_FILE``) → a :class:`Machine`.

The file is a tree: ``<system>`` holds ``<cpu>`` sockets, which hold nested ``<pci>``
devices and bridges; a GPU is a ``<pci>`` whose class is a display or accelerator
class, usually with a ``<gpu dev sm|gcn rank>`` child listing its ``<nvlink>`` or
``<xgmi target count tclass>`` links; NICs are ``<pci>`` network devices or ``<nic>``
elements with ``<net name speed>`` ports (speed in Mb/s).

What becomes of it:

* NVLink/xGMI between GPUs: one directed link per listed ``<nvlink>``/``<xgmi>``, at
  ``count`` × the generation's per-link rate (:mod:`te_ccl.importers.hardware`).
* NVLink to an NVSwitch (``tclass`` 0x0680…, or a target that is no device of the file):
  every NVSwitch chip is merged into one non-blocking switch ``nvswitch``.
* PCIe: modelled only when NVLink/xGMI does not join every GPU (NCCL then moves data
  over PCIe and the CPUs): bridges and CPUs become switches, each link at the rate of
  its ``link_speed``/``link_width``, CPUs joined by their SMP interconnect.
* NICs: kept for cluster composition, attached to the GPUs nearest them on PCIe.
* Cloud files that leave the GPUs out (NCCL probes them at run time): ``gpus`` of them
  are placed evenly on the file's CPUs, on a PCIe link of their generation.

Quirks of real dumps are read with a warning rather than refused: an NVLink/xGMI whose
target is the GPU itself (Azure's NC A100 v4 file) or a GPU absent from the file is
skipped; a bridge listed several times with one busid (RCCL's ``topo_4p4h.xml``) is one
bridge holding what every listing holds; a NIC speed of -1 or beyond any port is
taken as unknown.

The parser never resolves entities, never loads a DTD and never touches the network;
a document with a ``DOCTYPE`` is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from te_ccl.errors import SpecError
from te_ccl.importers import hardware as hw
from te_ccl.importers.machine import Machine, Nic, switch_node
from te_ccl.topology.model import Link

__all__ = ["read_nccl_xml", "parse_nccl_xml"]

_KNOWN_ATTRS: dict[str, frozenset[str]] = {
    "system": frozenset({"version"}),
    "cpu": frozenset({"numaid", "affinity", "arch", "vendor", "familyid", "modelid",
                      "host_hash"}),
    "pci": frozenset({"busid", "class", "vendor", "device", "subsystem_vendor",
                      "subsystem_device", "link_speed", "link_width"}),
    "gpu": frozenset({"dev", "sm", "gcn", "arch", "rank", "gdr", "mlopart"}),
    "nvlink": frozenset({"target", "count", "tclass"}),
    "xgmi": frozenset({"target", "count", "tclass"}),
    "c2c": frozenset({"bw", "count"}),
    "nic": frozenset(),
    "net": frozenset({"name", "dev", "speed", "port", "latency", "guid", "maxconn", "gdr",
                      "coll"}),
}
_MAX_COUNT = 1024
_MAX_NIC_Mbps = 3_200_000  # no NIC port is faster than 3.2 Tb/s


@dataclass
class _Device:
    """A node of the PCIe tree: a CPU, a bridge, a GPU or a NIC."""

    name: str
    kind: str                      # cpu | bridge | gpu | nic
    line: int
    parent: _Device | None = None
    link_Bps: float | None = None  # PCIe link to the parent
    vendor: str | None = None      # CPU vendor (SMP link rating)
    busid: str | None = None
    gpu: etree._Element | None = None
    nets: list[tuple[str, float | None]] = field(default_factory=list)

    def ancestors(self) -> list[_Device]:
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out


def _norm_busid(busid: str) -> str:
    """``0000:07:00.0`` and ``00000000:07:00.0`` name the same device."""
    parts = busid.strip().lower().split(":")
    if len(parts) == 3:
        try:
            return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
        except ValueError:
            return busid.strip().lower()
    return busid.strip().lower()


class _Reader:
    def __init__(self, file: str) -> None:
        self.file = file
        self.devices: list[_Device] = []
        self.machine: Machine | None = None
        self.bridges: dict[str, tuple[_Device, list[int]]] = {}  # busid -> bridge, listings

    def error(self, el: etree._Element | None, message: str) -> SpecError:
        return SpecError(message, file=self.file, line=getattr(el, "sourceline", None))

    def warn(self, line: int | None, message: str) -> None:
        where = f"{self.file}:{line}" if line is not None else self.file
        self.machine.report.add("warnings", f"{where}: {message}")

    def attr_int(self, el: etree._Element, key: str, default: int | None = None) -> int | None:
        raw = el.get(key)
        if raw is None or raw.strip() == "":
            return default
        try:
            value = int(raw.strip(), 0)
        except ValueError:
            raise self.error(el, f"<{el.tag}> {key}: expected an integer, got {raw!r}") from None
        return value

    def walk(self, root: etree._Element, machine: Machine) -> None:
        if root.tag != "system":
            raise self.error(root, f"expected the root element <system>, got <{root.tag}>")
        self.machine = machine
        self.check_attrs(root)
        machine.report.add("read", f"NCCL topology XML, <system version="
                                   f"{root.get('version', '?')}>")
        for child in self.elements(root):
            if child.tag == "cpu":
                self.cpu(child)
            else:
                self.ignore(child, "expected <cpu> under <system>")
        for busid, (_, lines) in self.bridges.items():
            if len(lines) > 1:
                self.warn(lines[1], f"<pci busid={busid!r}> listed {len(lines)} times (lines "
                                    f"{', '.join(map(str, lines))}): read as one bridge holding "
                                    "the devices of every listing")

    def elements(self, el: etree._Element) -> Iterator[etree._Element]:
        """Child elements; comments and processing instructions are skipped."""
        return (c for c in el if isinstance(c.tag, str))

    def check_attrs(self, el: etree._Element) -> None:
        known = _KNOWN_ATTRS.get(el.tag, frozenset())
        for key in el.attrib:
            if key not in known:
                self.machine.report.add("ignored", f"line {el.sourceline}: attribute "
                                                   f"{key!r} of <{el.tag}>")

    def ignore(self, el: etree._Element, why: str) -> None:
        self.machine.report.add("ignored", f"line {el.sourceline}: <{el.tag}> ({why})")

    def cpu(self, el: etree._Element) -> None:
        self.check_attrs(el)
        numa = el.get("numaid", str(sum(d.kind == "cpu" for d in self.devices)))
        name = f"cpu{numa}"
        if any(d.name == name for d in self.devices):
            raise self.error(el, f"<cpu> numaid: duplicate numaid {numa!r}")
        dev = _Device(name, "cpu", el.sourceline, vendor=el.get("vendor"))
        self.devices.append(dev)
        self.children(el, dev)

    def children(self, el: etree._Element, parent: _Device) -> None:
        for child in self.elements(el):
            if child.tag == "pci":
                self.pci(child, parent)
            elif child.tag == "gpu":
                self.gpu(child, parent, None)
            elif child.tag == "nic":
                self.nic(child, parent)
            else:
                self.ignore(child, f"not expected inside <{el.tag}>")

    def pci(self, el: etree._Element, parent: _Device) -> None:
        self.check_attrs(el)
        busid = el.get("busid")
        if not busid:
            raise self.error(el, "<pci> busid: missing attribute (expected e.g. 0000:07:00.0)")
        width = self.attr_int(el, "link_width", 0) or 0
        link = hw.pcie_Bps(el.get("link_speed", ""), width)
        cls = (el.get("class") or "").lower()
        gpus = [c for c in self.elements(el) if c.tag == "gpu"]
        nics = [c for c in self.elements(el) if c.tag == "nic"]
        if gpus or any(cls.startswith(c) for c in hw.GPU_CLASSES):
            if not gpus:
                dev = _Device(f"pci{_norm_busid(busid)}", "gpu", el.sourceline, parent, link,
                              busid=_norm_busid(busid))
                self.devices.append(dev)
            for g in gpus:
                self.gpu(g, parent, (busid, link))
            for child in self.elements(el):
                if child.tag != "gpu":
                    self.ignore(child, "not expected inside a GPU's <pci>")
            return
        if nics or cls.startswith(hw.NIC_CLASS_PREFIX):
            dev = _Device(f"nic{_norm_busid(busid)}", "nic", el.sourceline, parent, link,
                          busid=_norm_busid(busid))
            self.devices.append(dev)
            for n in nics:
                self.nets(n, dev)
            for child in self.elements(el):
                if child.tag != "nic":
                    self.ignore(child, "not expected inside a NIC's <pci>")
            return
        key = _norm_busid(busid)
        if key in self.bridges:  # one device: what this listing holds hangs off the first
            first, lines = self.bridges[key]
            lines.append(el.sourceline)
            self.children(el, first)
            return
        dev = _Device(f"pci{key}", "bridge", el.sourceline, parent, link, busid=key)
        self.bridges[key] = (dev, [el.sourceline])
        self.devices.append(dev)
        self.children(el, dev)

    def gpu(self, el: etree._Element, parent: _Device, pci: tuple[str, float | None] | None
            ) -> None:
        self.check_attrs(el)
        busid, link = pci if pci else (None, None)
        dev = _Device(f"gpu@{el.sourceline}", "gpu", el.sourceline, parent, link,
                      busid=_norm_busid(busid) if busid else None, gpu=el)
        self.devices.append(dev)
        for child in self.elements(el):
            if child.tag in ("nvlink", "xgmi", "c2c"):
                self.check_attrs(child)
            else:
                self.ignore(child, "not expected inside <gpu>")

    def nic(self, el: etree._Element, parent: _Device) -> None:
        dev = _Device(f"nic@{el.sourceline}", "nic", el.sourceline, parent, None)
        self.devices.append(dev)
        self.nets(el, dev)

    def nets(self, el: etree._Element, dev: _Device) -> None:
        self.check_attrs(el)
        for net in self.elements(el):
            if net.tag != "net":
                self.ignore(net, "expected <net> inside <nic>")
                continue
            self.check_attrs(net)
            speed = self.attr_int(net, "speed")
            if speed is not None and not 0 < speed <= _MAX_NIC_Mbps:
                self.warn(net.sourceline, f"<net> speed {net.get('speed')!r} is no NIC port's "
                                          "rate in Mb/s (some NICs write -1, some other "
                                          "units): taken at its PCIe link rate; --nic-bw "
                                          "gives the rate")
                speed = None
            dev.nets.append((net.get("name") or f"net{len(dev.nets)}",
                             speed * 1e6 / 8 if speed else None))


def parse_nccl_xml(data: bytes, file: str, name: str, arch: str | None = None,
                   nvswitch_links: int | None = None, gpus: int | None = None) -> Machine:
    """Parse NCCL topology XML ``data`` read from ``file`` into a :class:`Machine`.

    ``arch`` names the GPU generation (over what the file says); ``nvswitch_links`` says
    every GPU has that many NVLinks to an NVSwitch and ``gpus`` how many GPUs there are,
    for cloud files that list no NVLinks or no GPUs.
    """
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             dtd_validation=False, huge_tree=False, remove_comments=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as e:
        line = e.lineno if e.lineno else None
        raise SpecError(f"malformed XML ({e.msg}); expected an NCCL topology XML "
                        "(<system> with <cpu>, <pci>, <gpu> elements)", file=file,
                        line=line) from None
    if root is None:
        raise SpecError("empty document; expected an NCCL topology XML", file=file)
    if root.getroottree().docinfo.doctype:
        raise SpecError("DOCTYPE declarations are not accepted (entities are never "
                        "expanded); expected a plain NCCL topology XML", file=file, line=1)
    machine = Machine(name, file, source=f"imported from {Path(file).name} "
                                         "(NCCL topology XML)")
    reader = _Reader(file)
    reader.walk(root, machine)
    _build(reader, machine, arch, nvswitch_links, gpus)
    return machine


def read_nccl_xml(path: Path, label: str, arch: str | None = None,
                  nvswitch_links: int | None = None, gpus: int | None = None) -> Machine:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror}", file=label) from None
    return parse_nccl_xml(data, label, path.stem, arch, nvswitch_links, gpus)


def _ranked_gpus(reader: _Reader) -> list[_Device]:
    gpus = [d for d in reader.devices if d.kind == "gpu"]
    ranks = [reader.attr_int(d.gpu, "rank") if d.gpu is not None else None for d in gpus]
    if gpus and all(r is not None for r in ranks):
        seen: dict[int, _Device] = {}
        for d, r in zip(gpus, ranks, strict=True):
            if r in seen:
                raise reader.error(d.gpu, f"<gpu> rank: rank {r} given twice (first at line "
                                          f"{seen[r].line})")
            seen[r] = d
        gpus = [seen[r] for r in sorted(seen)]
    for i, d in enumerate(gpus):
        d.name = f"g{i}"
    return gpus


def _generation(reader: _Reader, d: _Device, tag: str, arch: str | None) -> hw.Figure:
    """Per-link rate of ``d``'s ``tag`` links: of ``arch`` if given, else of the file's."""
    attr, per_link = ("gcn", hw.xgmi_per_link) if tag == "xgmi" else ("sm", hw.nvlink_per_link)
    try:
        return per_link(arch or d.gpu.get(attr) or "")
    except hw.UnknownGeneration as e:
        if arch:
            raise SpecError(str(e), key="--arch") from None
        raise reader.error(d.gpu, f"<gpu> {attr}: {e} (or give --arch)") from None


def _fabric_links(reader: _Reader, machine: Machine, gpus: list[_Device],
                  arch: str | None) -> bool:
    """Add NVLink/xGMI links; True if they alone join every GPU."""
    by_bus = {d.busid: d for d in gpus if d.busid}
    known = {x.busid for x in reader.devices if x.busid}
    lat = hw.NVLINK_LATENCY
    switch_bw: dict[str, float] = {}
    used = False
    for d in gpus:
        if d.gpu is None:
            continue
        for link in reader.elements(d.gpu):
            if link.tag == "c2c":
                machine.report.add("ignored", f"line {link.sourceline}: <c2c> (a GPU-to-CPU "
                                              "link, not a path between GPUs)")
                continue
            if link.tag not in ("nvlink", "xgmi"):
                continue
            count = reader.attr_int(link, "count", 1)
            if not 1 <= count <= _MAX_COUNT:
                raise reader.error(link, f"<{link.tag}> count: expected 1..{_MAX_COUNT} "
                                         f"links, got {count}")
            target = _norm_busid(link.get("target") or "")
            tclass = (link.get("tclass") or "").lower()
            is_gpu = any(tclass.startswith(c) for c in hw.GPU_CLASSES)
            if target == d.busid:
                reader.warn(link.sourceline, f"<{link.tag}> target {link.get('target')!r} is "
                                             "the GPU's own busid: link skipped")
                continue
            if target not in by_bus and (is_gpu or link.tag == "xgmi"):
                reader.warn(link.sourceline, f"<{link.tag}> target {link.get('target')!r} is "
                                             "no GPU of this file: link skipped")
                continue
            to_switch = target not in by_bus and (tclass.startswith(hw.NVSWITCH_CLASS)
                                                  or target not in known)
            if target not in by_bus and not to_switch:
                machine.report.add("ignored", f"line {link.sourceline}: <nvlink> to "
                                              f"{link.get('target')!r} (a CPU, not a GPU)")
                continue
            per_link = _generation(reader, d, link.tag, arch)
            machine.report.add("assumed", f"{link.tag} per link: {per_link.source}")
            used = True
            if to_switch:
                switch_bw[d.name] = switch_bw.get(d.name, 0.0) + count * per_link.value
            else:
                machine.links.append(Link(d.name, by_bus[target].name,
                                          count * per_link.value, lat.value))
    if switch_bw:
        machine.switches.append(switch_node("nvswitch", copy=True))
        for g, bw in switch_bw.items():
            machine.add_both(g, "nvswitch", bw, lat.value)
        machine.report.add("assumed", "NVSwitch chips merged into one non-blocking switch "
                                      "'nvswitch' that can multicast (copy) but not reduce; "
                                      "each GPU's link to it is the sum of its NVLinks")
    if used:
        machine.report.add("assumed", lat.source)
    return used and machine.gpus_joined()


def _pcie_rate(machine: Machine, d: _Device, arch: str | None) -> float:
    if d.link_Bps:
        return d.link_Bps
    fig = hw.pcie_default(arch)
    machine.report.add("assumed", f"PCIe links without link_speed/link_width: {fig.source}")
    return fig.value


def _pcie_tree(reader: _Reader, machine: Machine, arch: str | None) -> None:
    """Bridges and CPUs as switches, each device linked to its parent at its PCIe rate."""
    lat = hw.PCIE_LATENCY.value
    for d in reader.devices:
        if d.kind in ("cpu", "bridge"):
            machine.switches.append(switch_node(d.name))
        if d.parent is not None and d.kind in ("bridge", "gpu"):
            machine.add_both(d.name, d.parent.name, _pcie_rate(machine, d, arch), lat)
    cpus = [d for d in reader.devices if d.kind == "cpu"]
    for i, a in enumerate(cpus):
        for b in cpus[i + 1:]:
            smp = hw.smp_link(a.vendor)
            machine.add_both(a.name, b.name, smp.value, lat)
            machine.report.add("assumed", f"CPU-to-CPU: {smp.source}")
    machine.report.add("assumed", hw.PCIE_LATENCY.source)


def _nearest_gpus(nic: _Device, gpus: list[_Device]) -> list[_Device]:
    """GPUs whose common PCIe ancestor with ``nic`` is deepest (PIX before PXB before SYS)."""
    up = nic.ancestors()
    depth = {id(a): len(up) - i for i, a in enumerate(up)}

    def closeness(g: _Device) -> int:
        return max((depth.get(id(a), 0) for a in g.ancestors()), default=0)

    best = max((closeness(g) for g in gpus), default=0)
    return [g for g in gpus if closeness(g) == best]


def _assumed_nvswitch(machine: Machine, gpus: list[_Device], arch: str | None,
                      links: int) -> bool:
    """Join GPUs the file lists without NVLinks to an NVSwitch the user says they have."""
    if machine.links:
        raise SpecError("expected a dump that lists no NVLinks; this one lists "
                        f"{len(machine.links)} NVLink/xGMI links", file=machine.file,
                        key="--nvswitch-links")
    if not 1 <= links <= _MAX_COUNT:
        raise SpecError(f"expected 1..{_MAX_COUNT} links, got {links}", key="--nvswitch-links")
    try:
        per_link = hw.nvlink_per_link(arch)
    except hw.UnknownGeneration as e:
        raise SpecError(f"{e} (--arch)", key="--arch") from None
    machine.switches.append(switch_node("nvswitch", copy=True))
    for d in gpus:
        machine.add_both(d.name, "nvswitch", links * per_link.value, hw.NVLINK_LATENCY.value)
    machine.report.add("assumed", f"given: every GPU has {links} NVLinks to an NVSwitch "
                                  f"(modelled as one non-blocking switch); {per_link.source}")
    machine.report.add("assumed", hw.NVLINK_LATENCY.source)
    return True


def _given_gpus(reader: _Reader, machine: Machine, count: int, arch: str | None
                ) -> list[_Device]:
    """``count`` GPUs for a file that lists none, spread evenly over its CPUs in order."""
    listed = sum(d.kind == "gpu" for d in reader.devices)
    if listed:
        raise SpecError(f"expected a dump that lists no GPUs; this one lists {listed}",
                        file=reader.file, key="--gpus")
    if not 2 <= count <= _MAX_COUNT:
        raise SpecError(f"expected 2..{_MAX_COUNT} GPUs, got {count}", key="--gpus")
    if arch is None:
        raise SpecError("expected the GPU generation with --gpus (e.g. --arch 86 for A10G, "
                        "90 for H100)", key="--arch")
    cpus = [d for d in reader.devices if d.kind == "cpu"]
    if not cpus:
        raise SpecError("expected a <cpu> to place the GPUs of --gpus on; the file lists none",
                        file=reader.file, key="--gpus")
    gpus = [_Device(f"g{i}", "gpu", cpus[0].line, cpus[i * len(cpus) // count])
            for i in range(count)]
    reader.devices += gpus
    machine.report.add("assumed", f"given: {count} GPUs of generation {arch} (--gpus, "
                                  f"--arch), which the file does not list, spread evenly over "
                                  f"its {len(cpus)} CPUs")
    return gpus


def _build(reader: _Reader, machine: Machine, arch_given: str | None = None,
           nvswitch_links: int | None = None, gpus_given: int | None = None) -> None:
    if gpus_given is None:
        gpus = _ranked_gpus(reader)
    else:
        gpus = _given_gpus(reader, machine, gpus_given, arch_given)
    if len(gpus) < 2:
        hint = "" if gpus else ("; for a file that leaves its GPUs out (a cloud NCCL_TOPO_FILE)"
                                " give --gpus N --arch GEN, and --nvswitch-links L if they "
                                "hang on an NVSwitch")
        raise SpecError(f"expected at least 2 GPUs, found {len(gpus)} (a GPU is a <gpu> "
                        f"element or a <pci> of a display/accelerator class){hint}",
                        file=reader.file)
    machine.gpus = [d.name for d in gpus]
    listed = next((d.gpu.get("gcn") or d.gpu.get("sm") for d in gpus if d.gpu is not None),
                  None)
    arch = arch_given or listed
    described = sum(d.gpu is not None for d in gpus)
    machine.report.add("read", f"{len(gpus)} GPUs ({described} with a <gpu> element"
                               + (f", generation {listed}" if listed else "") + ")")
    if arch_given and listed and arch_given != listed:
        machine.report.add("assumed", f"given: generation {arch_given} (--arch) instead of "
                                      f"the file's {listed}")
    if described < len(gpus) and nvswitch_links is None and gpus_given is None:
        machine.report.add("assumed", f"{len(gpus) - described} GPUs appear only as PCI "
                                      "devices (no <gpu> element): NCCL probes their NVLinks "
                                      "at run time, so the file carries none; they are "
                                      "joined over PCIe only")
    joined = _fabric_links(reader, machine, gpus, arch_given)
    if nvswitch_links is not None:
        joined = _assumed_nvswitch(machine, gpus, arch, nvswitch_links)
    machine.report.add("read", f"{sum(1 for k in machine.links)} directed NVLink/xGMI links")
    if joined:
        machine.report.add("ignored", "PCIe paths between GPUs: NVLink/xGMI joins every GPU, "
                                      "and NCCL sends over it rather than over PCIe")
    else:
        if described and not machine.links:
            machine.report.add("read", "no <nvlink>/<xgmi> elements: the GPUs are joined "
                                       "over PCIe only")
        _pcie_tree(reader, machine, arch)
        machine.report.add("read", "PCIe tree: " + ", ".join(
            f"{sum(d.kind == k for d in reader.devices)} {k}s" for k in ("cpu", "bridge")))
    silent: list[str] = []
    for d in reader.devices:
        if d.kind != "nic":
            continue
        near = _nearest_gpus(d, gpus)
        pcie = _pcie_rate(machine, d, arch)
        for net, speed in d.nets or [(d.name, None)]:
            if speed is None:
                silent.append(net)
            machine.nics.append(Nic(net, speed or pcie, tuple(g.name for g in near), pcie))
    if silent:
        machine.report.add("assumed", f"{len(silent)} NICs give no usable <net speed> ("
                                      f"{', '.join(silent[:3])}{', …' if len(silent) > 3 else ''})"
                                      ": each is taken at its PCIe link rate")
    if machine.nics:
        machine.report.add("read", f"{len(machine.nics)} NIC ports ("
                           + ", ".join(sorted({f'{n.bandwidth_Bps * 8 / 1e9:g} Gb/s'
                                               for n in machine.nics})) + "); used only "
                           "when composing a cluster (--nodes)")
