"""Compose N copies of one imported node into a cluster joined through their NICs.

Node ``i``'s nodes are renamed ``n{i}.{name}`` (ranks are node-major). The NIC ports
that serve the same GPUs form one *NIC group* (a GPU with four 100 Gb/s ports has one
group of 400 Gb/s); a group serving one GPU becomes a direct GPU-to-fabric link, a
group shared by several GPUs becomes a switch ``n{i}.nic{k}`` they reach over PCIe.

Fabrics:

* ``rail``: NIC group k of every node goes to rail switch ``rail{k}`` (rail-optimized);
  with ``spine_Bps``, a switch ``spine`` joins the rails at that bandwidth per rail.
* ``fat-tree``: every node's groups go to its leaf ``leaf{i}``; leaves join one
  ``spine`` at ``spine_Bps`` each (default: the node's NIC total, full bisection).
* ``single-switch``: every NIC group goes to one switch ``net``.

>>> from te_ccl.importers.machine import Machine, Nic
>>> m = Machine("box", "box.xml", "test", gpus=["g0", "g1"])
>>> m.add_both("g0", "g1", 100e9, 0.7e-6)
>>> m.nics = [Nic("mlx5_0", 50e9, ("g0",), 32e9), Nic("mlx5_1", 50e9, ("g1",), 32e9)]
>>> t = compose(m, 2, "rail")
>>> t.gpus, t.link("n0.g0", "rail0").bandwidth_Bps
(('n0.g0', 'n0.g1', 'n1.g0', 'n1.g1'), 32000000000.0)
"""

from __future__ import annotations

from te_ccl.errors import SpecError
from te_ccl.importers import hardware as hw
from te_ccl.importers.machine import Machine, check_connected, switch_node
from te_ccl.topology.model import Link, Node, Topology

__all__ = ["compose", "FABRICS"]

FABRICS = ("rail", "fat-tree", "single-switch")
MAX_NODES = 1024


def _groups(machine: Machine) -> list[tuple[tuple[str, ...], float, float]]:
    """(GPUs served, network bandwidth, PCIe bandwidth) per NIC group, in NIC order.

    Ports of a group add up, and so do their PCIe links (each port has its own).
    """
    groups: dict[tuple[str, ...], list[float]] = {}
    for nic in machine.nics:
        bw = groups.setdefault(nic.gpus, [0.0, 0.0])
        bw[0] += nic.bandwidth_Bps
        bw[1] += nic.pcie_Bps
    return [(gpus, net, pcie) for gpus, (net, pcie) in groups.items()]


def compose(machine: Machine, nodes: int, fabric: str, spine_Bps: float | None = None
            ) -> Topology:
    """``nodes`` copies of ``machine`` joined by ``fabric`` through their NICs."""
    if fabric not in FABRICS:
        raise SpecError(f"expected one of {', '.join(FABRICS)}, got {fabric!r}", key="--fabric")
    if not 2 <= nodes <= MAX_NODES:
        raise SpecError(f"expected 2..{MAX_NODES} nodes, got {nodes}", key="--nodes")
    if not machine.nics:
        raise SpecError("the dump lists no NICs, so its nodes cannot be joined; expected "
                        "<nic>/<net> elements or NIC columns", file=machine.file)
    base = machine.topology()
    groups = _groups(machine)
    pcie_lat, net_lat = hw.PCIE_LATENCY.value, hw.NET_LATENCY.value
    nodes_out: list[Node] = []
    links: list[Link] = []
    for i in range(nodes):
        nodes_out += [Node(f"n{i}.{g}") for g in base.gpus]
    for i in range(nodes):
        nodes_out += [switch_node(f"n{i}.{s}", copy=base.node(s).can_copy) for s in base.switches]
        links += [Link(f"n{i}.{k.src}", f"n{i}.{k.dst}", k.bandwidth_Bps, k.latency_s)
                  for k in base.links]

    def both(a: str, b: str, bw: float, lat: float) -> None:
        links.extend((Link(a, b, bw, lat), Link(b, a, bw, lat)))

    fabric_switches = {"rail": [f"rail{k}" for k in range(len(groups))],
                       "fat-tree": [f"leaf{i}" for i in range(nodes)] + ["spine"],
                       "single-switch": ["net"]}[fabric]
    if fabric == "rail" and spine_Bps:
        fabric_switches.append("spine")
    nodes_out += [switch_node(s) for s in fabric_switches]
    for i in range(nodes):
        for k, (gpus, net, pcie) in enumerate(groups):
            port = {"rail": f"rail{k}", "fat-tree": f"leaf{i}", "single-switch": "net"}[fabric]
            if len(gpus) == 1:
                both(f"n{i}.{gpus[0]}", port, min(net, pcie), net_lat)
                continue
            nic = f"n{i}.nic{k}"
            nodes_out.append(switch_node(nic))
            for g in gpus:
                both(f"n{i}.{g}", nic, pcie, pcie_lat)
            both(nic, port, net, net_lat)
    total = sum(net for _, net, _ in groups)
    if fabric == "fat-tree":
        for i in range(nodes):
            both(f"leaf{i}", "spine", spine_Bps or total, net_lat)
    elif fabric == "rail" and spine_Bps:
        for k in range(len(groups)):
            both(f"rail{k}", "spine", spine_Bps, net_lat)
    r = machine.report
    r.add("read", f"cluster: {nodes} nodes x {base.ngpus} GPUs, {fabric} fabric, "
                  f"{len(groups)} NIC groups per node ({total * 8 / 1e9:g} Gb/s per node)")
    r.add("assumed", "NIC ports serving the same GPUs are one group (their bandwidths add); "
                     "a GPU's link to the fabric is capped by its PCIe rate")
    if fabric == "fat-tree" and not spine_Bps:
        r.add("assumed", "leaf-to-spine bandwidth = the node's NIC total (full bisection)")
    r.add("assumed", hw.NET_LATENCY.source)
    topo = Topology.build(f"{machine.name}x{nodes}", nodes_out, links,
                          source=machine.source, description=f"{nodes} x {machine.name} "
                          f"({base.ngpus} GPUs each), {fabric} fabric")
    check_connected(topo, machine.file)
    return topo
