"""NCCL/RCCL topology XML: real public dumps import with the right links; bad files exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from te_ccl.errors import SpecError
from te_ccl.importers import ImportOptions, import_file, sniff_format
from te_ccl.importers.nccl_xml import parse_nccl_xml
from te_ccl.spec.topology import load_topology

DATA = Path(__file__).parent / "data"
GB = 1e9
REAL_XML = sorted(p.name for p in DATA.glob("*.xml"))


def out_bw(t, node):
    return sum(k.bandwidth_Bps for k in t.out_links(node))


# Cloud files that leave the GPUs out, and what the machine has (README.md of the data).
GPULESS = {"aws-p5.48xl-static-topo.xml": ImportOptions(gpus=8, arch="90", nvswitch_links=18),
           "aws-g5.48xl-topo.xml": ImportOptions(gpus=8, arch="86")}


@pytest.mark.parametrize("name", REAL_XML)
def test_every_real_dump_imports_connected(name):
    r = import_file(DATA / name, GPULESS.get(name, ImportOptions()))
    assert r.format == "nccl-xml" and r.topology.ngpus >= 4
    assert r.report.read and r.report.assumed


@pytest.mark.parametrize("name", sorted(GPULESS))
def test_a_file_without_gpus_names_the_flags_that_let_it_in(name):
    with pytest.raises(SpecError) as exc:
        import_file(DATA / name)
    message = str(exc.value)
    assert "found 0" in message and all(f in message for f in ("--gpus", "--arch",
                                                                 "--nvswitch-links"))


def test_p5_static_file_with_given_gpus_is_an_nvswitch_box():
    r = import_file(DATA / "aws-p5.48xl-static-topo.xml", GPULESS["aws-p5.48xl-static-topo.xml"])
    t = r.topology
    assert t.gpus == tuple(f"g{i}" for i in range(8)) and t.switches == ("nvswitch",)
    assert t.link("g7", "nvswitch").bandwidth_Bps == 18 * 25 * GB
    assert any("given: 8 GPUs of generation 90" in a for a in r.report.assumed)


def test_g5_given_gpus_sit_four_on_each_socket_over_pcie():
    t = import_file(DATA / "aws-g5.48xl-topo.xml", GPULESS["aws-g5.48xl-topo.xml"]).topology
    assert [k.dst for g in t.gpus for k in t.out_links(g)] == ["cpu0"] * 4 + ["cpu1"] * 4
    assert t.link("g0", "cpu0").bandwidth_Bps == pytest.approx(16e9 * 128 / 130 / 8 * 16)


@pytest.mark.parametrize("name, options, expect", [
    ("aws-p5.48xl-topo.xml", ImportOptions(gpus=8, arch="90"), "this one lists 8"),
    ("aws-g5.48xl-topo.xml", ImportOptions(gpus=8), "--arch: expected the GPU generation"),
    ("aws-g5.48xl-topo.xml", ImportOptions(gpus=1, arch="86"), "--gpus: expected 2..1024"),
    ("dgx1-v100-nvidia-smi-topo.txt", ImportOptions(gpus=8, arch="70"),
     "--gpus: applies to NCCL topology XML only"),
])
def test_bad_gpus_option_is_one_spec_error(name, options, expect):
    with pytest.raises(SpecError, match=expect) as exc:
        import_file(DATA / name, options)
    assert exc.value.exit_code == 2


def test_a_system_without_cpus_cannot_take_given_gpus():
    with pytest.raises(SpecError, match="expected a <cpu> to place the GPUs"):
        parse_nccl_xml(b'<system version="1"/>', "x.xml", "x", arch="90", gpus=4)


def test_self_nvlinks_are_skipped_with_one_warning_each():
    r = import_file(DATA / "azure-ncv4-topo.xml")
    assert len(r.report.warnings) == 4 and all(
        "is the GPU's own busid: link skipped" in w for w in r.report.warnings)
    assert r.report.warnings[0].startswith(f"{DATA / 'azure-ncv4-topo.xml'}:5: <nvlink>")
    t = r.topology  # four PCIe A100s, one per NUMA node, joined through the CPUs
    assert t.ngpus == 4 and set(t.switches) == {"cpu0", "cpu1", "cpu2", "cpu3"}
    assert t.link("cpu0", "cpu3").bandwidth_Bps == 16 * GB


def test_a_bridge_listed_under_one_busid_eight_times_is_one_bridge():
    r = import_file(DATA / "rccl-topo_4p4h.xml")
    t = r.topology
    assert t.ngpus == 16 and len(set(t.switches)) == len(t.switches)
    # the eight GPUs listed under 0000:c5:00.0 all hang off that one bridge
    assert sorted(k.src for k in t.in_links("pci0000:c5:00.0") if k.src.startswith("g")) == \
        sorted(f"g{i}" for i in range(8))
    assert [w.split(": ", 1)[1][:29] for w in r.report.warnings] == \
        ["<pci busid='0000:c5:00.0'> li", "<pci busid='0000:e6:00.0'> li"]
    assert {k.bandwidth_Bps for k in t.links if k.src.startswith("g")
            and k.dst.startswith("g")} == {46 * GB}  # MI100 hives of four


@pytest.mark.parametrize("arch", [None, "gfx942"])
def test_numeric_gcn_940_is_mi300_with_or_without_arch(arch):
    t = import_file(DATA / "rccl-topo_4p_940.xml", ImportOptions(arch=arch)).topology
    assert t.ngpus == 4 and len(t.links) == 12 and {k.bandwidth_Bps for k in t.links} == {64 * GB}


def test_implausible_nic_speeds_are_taken_at_the_pcie_rate():
    r = import_file(DATA / "rccl-topo_4p_940.xml", ImportOptions(nodes=2))
    assert len(r.report.warnings) == 4 and "'200000000'" in r.report.warnings[0]
    assert r.topology.link("n0.g0", "rail0").bandwidth_Bps == pytest.approx(
        16e9 * 128 / 130 / 8 * 16)  # the NIC's PCIe Gen4 x16, not 25 TB/s
    xml = _switched(2).replace(b"</pci>\n  </cpu>", b"</pci>\n<nic><net name='e0' "
                               b"speed='-1'/></nic>\n  </cpu>")
    m = parse_nccl_xml(xml, "x.xml", "x")
    assert [n.name for n in m.nics] == ["e0"] and "'-1'" in m.report.warnings[0]


def test_gfx906_xgmi_at_50GBps():
    t = import_file(DATA / "rccl-topo_4p1h.xml").topology
    assert t.ngpus == 4 and {k.bandwidth_Bps for k in t.links} == {50 * GB}


def test_arch_overrides_the_generation_the_file_names():
    r = import_file(DATA / "rccl-topo_8p_940.xml", ImportOptions(arch="gfx90a"))
    assert {k.bandwidth_Bps for k in r.topology.links} == {50 * GB}
    assert any("instead of the file's gfx942" in a for a in r.report.assumed)
    with pytest.raises(SpecError, match="--arch: unknown GPU generation '90' for xGMI"):
        import_file(DATA / "rccl-topo_8p_940.xml", ImportOptions(arch="90"))


def test_links_to_a_gpu_absent_from_the_file_are_skipped_with_a_warning():
    xml = _xml(_gpu(0, '<nvlink target="0000:09:00.0" count="2" tclass="0x030200"/>')
               + _gpu(1, ""))
    m = parse_nccl_xml(xml, "x.xml", "x")
    assert m.report.warnings == ["x.xml:4: <nvlink> target '0000:09:00.0' is no GPU of this "
                                 "file: link skipped"]
    assert m.topology().switches == ("cpu0",)  # joined over PCIe instead


def test_mi300x_fully_connected_xgmi_at_64GBps():
    t = import_file(DATA / "rccl-topo_8p_940.xml").topology
    assert t.ngpus == 8 and not t.switches and len(t.links) == 56
    assert {k.bandwidth_Bps for k in t.links} == {64 * GB}
    assert all(k.latency_s == pytest.approx(0.7e-6) for k in t.links)


def test_mi250_bundles_follow_xgmi_counts():
    t = import_file(DATA / "rccl-topo_16p1h.xml").topology
    assert t.ngpus == 16 and not t.switches
    # gcd0 lists <xgmi count=4> to gcd1 (same package), 1 and 2 to others: 50 GB/s per link
    assert t.link("g0", "g1").bandwidth_Bps == 200 * GB
    assert {k.bandwidth_Bps for k in t.links} == {50 * GB, 100 * GB, 200 * GB}


def test_cloud_file_without_gpu_elements_falls_back_to_pcie():
    r = import_file(DATA / "aws-p4d-24xl-topo.xml")
    t = r.topology
    assert t.ngpus == 8 and "cpu0" in t.switches and "cpu1" in t.switches
    # 8 GT/s x16 = 7.877 GB/s per direction per PCIe link; UPI between the sockets
    assert t.link("g0", "pciffff:ff:01.0").bandwidth_Bps == pytest.approx(8e9 * 128 / 130 / 8 * 16)
    assert t.link("cpu0", "cpu1").bandwidth_Bps == 10 * GB
    assert any("no <gpu> element" in a for a in r.report.assumed)


def test_p5_nics_are_grouped_per_gpu_when_composed():
    r = import_file(DATA / "aws-p5.48xl-topo.xml", ImportOptions(nodes=2))
    t = r.topology
    assert t.ngpus == 16 and t.gpus[8] == "n1.g0"
    # four 100 Gb/s EFA ports behind each GPU's switch: one 400 Gb/s group per GPU
    assert t.link("n0.g0", "rail0").bandwidth_Bps == pytest.approx(4 * 12.5 * GB)
    assert t.link("rail0", "n1.g0").bandwidth_Bps == pytest.approx(4 * 12.5 * GB)


def _xml(gpus: str, nvlinks: str = "") -> bytes:
    return f"""<system version="1">
  <cpu numaid="0" vendor="GenuineIntel">
{gpus}
  </cpu>
</system>""".encode()


def _gpu(i: int, links: str, sm: str = "80") -> str:
    return (f'    <pci busid="0000:0{i}:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" '
            f'link_width="16">\n      <gpu dev="{i}" sm="{sm}" rank="{i}" gdr="1">{links}'
            "</gpu>\n    </pci>")


def _switched(n: int, sm: str = "90", count: int = 18) -> bytes:
    link = f'<nvlink target="fffffff:ff:ff.0" count="{count}" tclass="0x068000"/>'
    return _xml("\n".join(_gpu(i, link, sm) for i in range(n)))


def test_nvswitch_links_merge_into_one_switch():
    m = parse_nccl_xml(_switched(8), "h100.xml", "h100")
    t = m.topology()
    assert t.switches == ("nvswitch",) and t.node("nvswitch").can_copy
    assert t.link("g3", "nvswitch").bandwidth_Bps == 18 * 25 * GB  # 450 GB/s each way


def test_direct_nvlinks_use_count_times_generation_rate():
    links = {0: '<nvlink target="0000:01:00.0" count="2" tclass="0x030200"/>',
             1: '<nvlink target="0000:00:00.0" count="2" tclass="0x030200"/>'}
    t = parse_nccl_xml(_xml("\n".join(_gpu(i, links[i], "70") for i in (0, 1))), "x.xml",
                       "x").topology()
    assert t.link("g0", "g1").bandwidth_Bps == 50 * GB and not t.switches


def test_unknown_elements_and_attributes_are_reported_not_fatal():
    xml = _switched(2).replace(b'<cpu numaid="0"', b'<cpu numaid="0" colour="red"').replace(
        b"</system>", b"<widget/></system>")
    m = parse_nccl_xml(xml, "x.xml", "x")
    assert any("'colour'" in i for i in m.report.ignored)
    assert any("<widget>" in i for i in m.report.ignored)


@pytest.mark.parametrize("data, expect", [
    (b"<system><cpu>", "malformed XML"),
    (b"", "malformed XML"),
    (b"<notsystem/>", "expected the root element <system>"),
    (_switched(8, sm="89"), "unknown GPU generation '89'"),
    (_switched(2, sm="89"), "(or give --arch)"),
    (_switched(1), "expected at least 2 GPUs"),
    (_switched(2).replace(b'count="18"', b'count="lots"'), "expected an integer"),
    (_switched(2).replace(b'rank="1"', b'rank="0"'), "rank 0 given twice"),
    (b'<?xml version="1.0"?>\n<!DOCTYPE system [<!ENTITY a "aaaa">]>\n<system>&a;</system>',
     "DOCTYPE declarations are not accepted"),
])
def test_bad_xml_is_one_spec_error(data, expect):
    with pytest.raises(SpecError) as exc:
        parse_nccl_xml(data, "bad.xml", "bad")
    assert expect in str(exc.value) and str(exc.value).startswith("bad.xml")
    assert exc.value.exit_code == 2


def test_error_names_the_line():
    data = _switched(8, sm="89")
    with pytest.raises(SpecError) as exc:
        parse_nccl_xml(data, "bad.xml", "bad")
    assert exc.value.line == 4  # the first <gpu> element


def test_external_entities_are_never_fetched(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    xml = (f'<?xml version="1.0"?>\n<!DOCTYPE system [<!ENTITY x SYSTEM "file://{secret}">]>\n'
           "<system>&x;</system>").encode()
    with pytest.raises(SpecError) as exc:
        parse_nccl_xml(xml, "evil.xml", "evil")
    assert "TOP-SECRET" not in str(exc.value)


def test_load_topology_imports_xml_on_the_fly(tmp_path):
    path = tmp_path / "box.dump"  # not .xml: the content is sniffed
    path.write_bytes(_switched(4))
    assert sniff_format(path) == "nccl-xml"
    t = load_topology(str(path))
    assert t.ngpus == 4 and out_bw(t, "g0") == 450 * GB


def test_cloud_file_with_given_nvswitch_and_nic_rate():
    r = import_file(DATA / "azure-ndv4-topo.xml",
                    ImportOptions(arch="80", nvswitch_links=12, nic_Bps=25 * GB, nodes=2))
    t = r.topology
    assert t.ngpus == 16 and t.link("n0.g0", "n0.nvswitch").bandwidth_Bps == 300 * GB
    # two GPUs and two 200 Gb/s NICs behind each PCIe switch: one shared NIC group
    assert t.link("n0.nic0", "rail0").bandwidth_Bps == 2 * 25 * GB
    assert any("--nic-bw" in a for a in r.report.assumed)


@pytest.mark.parametrize("options, expect", [
    (ImportOptions(nvswitch_links=12), "unknown GPU generation None"),
    (ImportOptions(arch="80", nvswitch_links=0), "expected 1..1024 links"),
])
def test_bad_nvswitch_options(options, expect):
    with pytest.raises(SpecError, match=expect):
        import_file(DATA / "azure-ndv4-topo.xml", options)


def test_nvswitch_option_refused_when_the_dump_lists_nvlinks():
    with pytest.raises(SpecError, match="expected a dump that lists no NVLinks"):
        parse_nccl_xml(_switched(4), "x.xml", "x", arch="90", nvswitch_links=18)
