"""Any well-formed topology dump either imports, into a topology whose YAML the loader
reads back link for link, or is refused with one exit-2 error."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from te_ccl.errors import SpecError
from te_ccl.importers.cluster import compose
from te_ccl.importers.nccl_xml import parse_nccl_xml
from te_ccl.importers.smi_matrix import parse_nvidia_smi, parse_rocm_smi
from te_ccl.importers.yaml_out import topology_yaml
from te_ccl.spec.topology import topology_from_data
from te_ccl.spec.yamlio import parse_yaml
from te_ccl.topology.model import Topology

BUSIDS = ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0001:00:00.0",
          "fffffff:ff:ff.0", "", "zz"]  # the first five name devices, the rest only targets
CLASSES = ["0x030200", "0x038000", "0x120000", "0x020700", "0x020000", "0x060400",
           "0x068000", "0x0", ""]
INTS = st.one_of(*[st.integers(0, 20).map(str)] * 6,
                 st.sampled_from(["", "-1", "0x10", "lots", "99999"]))


def assert_loads_back(topo: Topology) -> None:
    back = topology_from_data(parse_yaml(topology_yaml(topo, ["fuzz"]), "f.yaml"), "f.yaml")
    assert back.gpus == topo.gpus and back.switches == topo.switches
    assert {k.key: (k.bandwidth_Bps, k.latency_s) for k in back.links} == \
        {k.key: (k.bandwidth_Bps, k.latency_s) for k in topo.links}


TERMINAL_CODES = st.sampled_from(["", "", "\x1b[4m", "\x1b[0m", "\x1b[1;31m", "\x1b(B\x1b[m"])


def _attrs(draw, table: dict) -> dict:
    return {k: draw(v) for k, v in table.items() if draw(st.booleans())}


@st.composite
def gpu(draw):
    el = etree.Element("gpu", _attrs(draw, {
        "dev": INTS, "rank": INTS,
        "sm": st.sampled_from(["60", "70", "80", "90", "100", "89", "", "abc"]),
        "gcn": st.sampled_from(["gfx942", "910", "gfx90a", "gfx1100", ""])}))
    for _ in range(draw(st.integers(0, 4))):
        link = etree.SubElement(el, draw(st.sampled_from(["nvlink", "xgmi", "c2c", "odd"])))
        link.attrib.update(_attrs(draw, {"target": st.sampled_from(BUSIDS), "count": INTS,
                                          "tclass": st.sampled_from(CLASSES)}))
    return el


@st.composite
def pci(draw, depth: int = 0):
    el = etree.Element("pci", {"busid": draw(st.sampled_from(BUSIDS[:5])),
                               "class": draw(st.sampled_from(CLASSES[:3] * 3 + CLASSES))})
    if draw(st.integers(0, 20)) == 0:
        del el.attrib["busid"]
    el.attrib.update(_attrs(draw, {
        "link_speed": st.sampled_from(["16.0 GT/s PCIe", "8 GT/s", "32 GT/s", "", "fast"]),
        "link_width": INTS}))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["gpu", "nic", "pci"] if depth < 2 else ["gpu", "nic"]))
        if kind == "gpu":
            el.append(draw(gpu()))
        elif kind == "nic":
            nic = etree.SubElement(el, "nic")
            for _ in range(draw(st.integers(0, 2))):
                etree.SubElement(nic, "net", _attrs(draw, {"name": st.sampled_from(["m0", "m1"]),
                                                           "speed": INTS}))
        else:
            el.append(draw(pci(depth + 1)))
    return el


@st.composite
def system(draw):
    root = etree.Element("system", {"version": draw(st.sampled_from(["1", "2"]))})
    for i in range(draw(st.integers(0, 3))):
        cpu = etree.SubElement(root, "cpu", _attrs(draw, {
            "numaid": st.sampled_from([str(i), "0", "x"]),
            "vendor": st.sampled_from(["GenuineIntel", "AuthenticAMD", "Other"])}))
        for _ in range(draw(st.integers(0, 4))):
            cpu.append(draw(pci()))
    return etree.tostring(root)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(system())
def test_any_wellformed_nccl_xml_imports_or_exits_2(data):
    try:
        machine = parse_nccl_xml(data, "fuzz.xml", "fuzz")
        topo = machine.topology()
        cluster = compose(machine, 2, "rail") if machine.nics else None
    except SpecError as e:
        assert e.exit_code == 2 and str(e).startswith("fuzz.xml")
        return
    assert topo.ngpus >= 2
    assert_loads_back(topo)
    if cluster is not None:
        assert cluster.ngpus == 2 * topo.ngpus
        assert_loads_back(cluster)


@st.composite
def pcie_system(draw):
    """A valid PCIe-only machine whose bridges take busids from a pool of three, so that
    one busid is listed under several parents, under itself or beside itself."""
    root = etree.Element("system", {"version": "2"})
    gpus = iter(range(1, 200))

    def bridge(depth: int) -> etree._Element:
        el = etree.Element("pci", {"busid": draw(st.sampled_from(["0000:c3:00.0", "0000:c5:00.0",
                                                                  "0000:e6:00.0"])),
                                   "class": "0x060400", "link_speed": "16.0 GT/s PCIe",
                                   "link_width": "16"})
        for _ in range(draw(st.integers(1, 3))):
            if depth < 2 and draw(st.booleans()):
                el.append(bridge(depth + 1))
            else:
                n = next(gpus)
                pci = etree.SubElement(el, "pci", {"busid": f"0001:{n:02x}:00.0",
                                                   "class": "0x038000", "link_speed": "8 GT/s",
                                                   "link_width": "16"})
                etree.SubElement(pci, "gpu", {"dev": str(n), "gcn": "gfx908", "rank": str(n)})
        return el

    for i in range(draw(st.integers(1, 2))):
        cpu = etree.SubElement(root, "cpu", {"numaid": str(i), "vendor": "AuthenticAMD"})
        for _ in range(draw(st.integers(1, 3))):
            cpu.append(bridge(0))
    return etree.tostring(root, pretty_print=True)


@settings(max_examples=40, deadline=None)
@given(pcie_system())
def test_repeated_bridge_busids_import_and_load_back(data):
    try:
        machine = parse_nccl_xml(data, "fuzz.xml", "fuzz")
    except SpecError as e:
        assert "expected at least 2 GPUs, found 1" in str(e)
        return
    topo = machine.topology()
    assert_loads_back(topo)
    bridges = {f"pci{b}" for b in re.findall(r'busid="(0000:[^"]+)"', data.decode())}
    assert {s for s in topo.switches if s.startswith("pci")} == bridges  # one switch per busid


CODES = st.sampled_from(["X", "NV1", "NV2", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS",
                         "SOC", "??", ""])


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 5), st.integers(0, 2), st.data())
def test_any_smi_matrix_imports_or_exits_2(n, nics, data):
    cols = [f"GPU{i}" for i in range(n)] + [f"NIC{j}" for j in range(nics)]
    rows = ["\t" + data.draw(TERMINAL_CODES) + "\t".join(cols) + "\tCPU Affinity"
            + data.draw(TERMINAL_CODES)]
    for i in range(data.draw(st.integers(0, n + 1))):
        cells = [data.draw(CODES) for _ in range(data.draw(st.integers(0, len(cols) + 1)))]
        rows.append(f"GPU{i}\t" + "\t".join(cells))
    arch = data.draw(st.sampled_from([None, "80", "90", "gfx942", "7"]))
    try:
        topo = parse_nvidia_smi("\n".join(rows) + "\n", "fuzz.txt", "fuzz", arch).topology()
    except SpecError as e:
        assert e.exit_code == 2
        return
    assert topo.ngpus == n
    assert_loads_back(topo)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.data())
def test_any_rocm_matrix_imports_or_exits_2(n, data):
    cells = st.sampled_from(["0", "XGMI", "PCIE", "xgmi", "??"])
    rows = ["=== Link Type between two GPUs ===", "  " + "  ".join(f"GPU{i}" for i in range(n))]
    for i in range(data.draw(st.integers(0, n))):
        rows.append(f"GPU{i} " + " ".join(data.draw(cells) for _ in range(n)))
    arch = data.draw(st.sampled_from([None, "gfx90a", "gfx942", "80"]))
    try:
        topo = parse_rocm_smi("\n".join(rows) + "\n", "fuzz.txt", "fuzz", arch).topology()
    except SpecError as e:
        assert e.exit_code == 2
        return
    assert topo.ngpus == n
    assert_loads_back(topo)
