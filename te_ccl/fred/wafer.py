"""The 20-NPU FRED wafer of the FRED paper as a port-level model: variants, switch ports, lanes.

Two-level "almost" fat tree: L1 switch ``k`` serves NPUs ``4k .. 4k+3``; every L1 has
one (aggregate) connection to the single L2. Variants (the FRED paper's table):

======== ======== ============ ==========================
variant  NPU–L1   L1–L2 per L1 in-switch reduce/multicast
======== ======== ============ ==========================
fred-a   3 TB/s   1.5 TB/s     no
fred-b   3 TB/s   1.5 TB/s     yes
fred-c   3 TB/s   12 TB/s      no
fred-d   3 TB/s   12 TB/s      yes
======== ======== ============ ==========================

**Ports are lanes.** A FRED switch port carries ``lane_Bps`` (750 GB/s, the wafer's
per-port rate: 3 TB/s of an NPU over 4 ports, as on the mesh). A link of bandwidth B
is ``B / lane_Bps`` ports, so an NPU has 4 ports and an L1–L2 trunk 2 (A/B) or 16
(C/D). Port numbering on L1 is lane-major, ``port(npu j, lane l) = l·4 + j``, so that
consecutive NPUs (an MP group under the paper's placement) share input µSwitches;
the uplink lanes follow. On L2, ``port(L1 k, lane u) = k·U + u``.

The I/O controllers (18 × 128 GB/s) are not switch ports here: weight streaming is
evaluated analytically (:mod:`te_ccl.fred.evaluate`).

A switch buffers packets, not chunks: 4 KB packets and 24 KB per data channel of a port
(the FRED paper). A new phase's configuration takes over once the packets of the previous one
have left: :attr:`Wafer.reconfig_s`, one packet on a lane (5.5 ns at 750 GB/s), is the
cost of every phase change.

**Latency** (the paper gives none; assumed, see :mod:`te_ccl.topology.generators`): a
wire between neighbours costs ``wire_latency_s`` and crossing a FRED_m(P) costs its
``2·ceil(log2 P) − 1`` µSwitch stages of ``uswitch_latency_s`` each, so the path of a
stream through L1, L2 and L1 is 4 wires and the stages of the three switches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

from te_ccl.errors import SpecError
from te_ccl.fred.switch import FredSwitch, build_fred
from te_ccl.topology.generators import (
    FRED_LANE_BPS,
    FRED_VARIANTS,
    MAX_GPUS,
    USWITCH_LATENCY_S,
    WIRE_LATENCY_S,
    fred_stages,
    wafer_shape,
)
from te_ccl.topology.model import Topology

__all__ = ["Wafer", "VARIANTS", "wafer_variant", "wafer_from_topology"]

TB = 1e12


@dataclass(frozen=True)
class Wafer:
    """A FRED wafer; bandwidths in bytes/s per direction."""

    name: str
    uplink_Bps: float
    in_switch: bool
    npus: int = 20
    npus_per_l1: int = 4
    npu_Bps: float = 3 * TB
    lane_Bps: float = FRED_LANE_BPS
    m: int = 3
    io_controllers: int = 18
    io_Bps: float = 128e9
    l1_names: tuple[str, ...] = ()
    l2_name: str = "L2"
    npu_names: tuple[str, ...] = ()
    packet_bytes: int = 4096
    channel_buffer_bytes: int = 24 * 1024
    can_reduce: bool | None = None  # None: as in_switch
    can_copy: bool | None = None  # None: as in_switch
    wire_latency_s: float = WIRE_LATENCY_S
    uswitch_latency_s: float = USWITCH_LATENCY_S

    def __post_init__(self) -> None:
        for what, bw in (("NPU-L1", self.npu_Bps), ("L1-L2", self.uplink_Bps)):
            lanes = bw / self.lane_Bps
            if lanes < 1 or abs(lanes - round(lanes)) > 1e-9:
                raise SpecError(f"{what} bandwidth {bw:.4g} B/s is not a whole number of "
                                f"{self.lane_Bps:.4g} B/s lanes", key="bandwidth")
        if self.npus % self.npus_per_l1:
            raise SpecError(f"{self.npus} NPUs do not fill L1 switches of "
                            f"{self.npus_per_l1}", key="npus")
        if not self.l1_names:
            object.__setattr__(self, "l1_names",
                               tuple(f"L1.{k}" for k in range(self.npus // self.npus_per_l1)))
        for cap in ("can_reduce", "can_copy"):
            if getattr(self, cap) is None:
                object.__setattr__(self, cap, self.in_switch)
        if not self.npu_names:
            object.__setattr__(self, "npu_names", tuple(f"npu{r}" for r in range(self.npus)))

    @property
    def n_l1(self) -> int:
        return self.npus // self.npus_per_l1

    @property
    def npu_lanes(self) -> int:
        return round(self.npu_Bps / self.lane_Bps)

    @property
    def uplink_lanes(self) -> int:
        return round(self.uplink_Bps / self.lane_Bps)

    @property
    def reconfig_s(self) -> float:
        """Time a phase change costs: the last packet of the old configuration leaves a lane."""
        return self.packet_bytes / self.lane_Bps

    def crossing_s(self, switch: str) -> float:
        """Latency of crossing ``switch``: its µSwitch stages."""
        ports = self.l2_ports if switch == self.l2_name else self.l1_ports
        return fred_stages(ports) * self.uswitch_latency_s

    def path_latency_s(self, sources: tuple[int, ...] | list[int],
                       destinations: tuple[int, ...] | list[int]) -> float:
        """Latency from the source NPUs to the destination NPUs: through their L1 (2 wires)
        when all share one, else up through the L2 and down (4 wires)."""
        l1s = {self.l1_of(r) for r in (*sources, *destinations)}
        one = self.crossing_s(self.l1_names[0])
        if len(l1s) == 1:
            return 2 * self.wire_latency_s + one
        return 4 * self.wire_latency_s + 2 * one + self.crossing_s(self.l2_name)

    def lanes(self, a: str, b: str) -> int:
        """Lanes of the link between nodes ``a`` and ``b`` (each direction has as many)."""
        return self.uplink_lanes if self.l2_name in (a, b) else self.npu_lanes

    def port(self, switch: str, neighbour: str, lane: int) -> int:
        """Port of ``switch`` on lane ``lane`` of its link to ``neighbour``."""
        if switch == self.l2_name:
            return self.l2_port(self._index[neighbour], lane)
        if neighbour == self.l2_name:
            return self.uplink_port(lane)
        return self.npu_port(self._index[neighbour], lane)

    def rank_of(self, npu: str) -> int:
        """Rank of the NPU named ``npu``."""
        return self._index[npu]

    @cached_property
    def _index(self) -> dict[str, int]:
        """Rank of each NPU and index of each L1, by name."""
        return {**{n: r for r, n in enumerate(self.npu_names)},
                **{n: k for k, n in enumerate(self.l1_names)}}

    def port_map(self) -> dict[str, list[tuple[str, int]]]:
        """Per switch, the (neighbour, lane) of each of its ports, in port order."""
        out: dict[str, list[tuple[str, int]]] = {}
        for k, name in enumerate(self.l1_names):
            ports: list[tuple[str, int]] = [("", 0)] * self.l1_ports
            for j in range(self.npus_per_l1):
                for lane in range(self.npu_lanes):
                    rank = k * self.npus_per_l1 + j
                    ports[self.npu_port(rank, lane)] = (self.npu_names[rank], lane)
            for lane in range(self.uplink_lanes):
                ports[self.uplink_port(lane)] = (self.l2_name, lane)
            out[name] = ports
        out[self.l2_name] = [(self.l1_names[k], u) for k in range(self.n_l1)
                             for u in range(self.uplink_lanes)]
        return out

    @property
    def l1_ports(self) -> int:
        return self.npus_per_l1 * self.npu_lanes + self.uplink_lanes

    @property
    def l2_ports(self) -> int:
        return self.n_l1 * self.uplink_lanes

    def l1_of(self, rank: int) -> int:
        return rank // self.npus_per_l1

    def npu_port(self, rank: int, lane: int) -> int:
        """L1 port of ``rank``'s lane ``lane`` (lane-major numbering)."""
        return lane * self.npus_per_l1 + rank % self.npus_per_l1

    def uplink_port(self, lane: int) -> int:
        return self.npus_per_l1 * self.npu_lanes + lane

    def l2_port(self, l1: int, lane: int) -> int:
        return l1 * self.uplink_lanes + lane

    @cached_property
    def switches(self) -> dict[str, FredSwitch]:
        """FRED_m(P) of every switch, by name (L1s first, then L2)."""
        out = {name: build_fred(self.l1_ports, self.m, name) for name in self.l1_names}
        out[self.l2_name] = build_fred(self.l2_ports, self.m, self.l2_name)
        return out

    def level(self, switch: str) -> str:
        return "L2" if switch == self.l2_name else "L1"


VARIANTS: dict[str, Wafer] = {name: Wafer(name, uplink, in_switch)
                               for name, (uplink, in_switch) in FRED_VARIANTS.items()}


@lru_cache(maxsize=64)  # one Wafer per variant and size: its switches are built once
def wafer_variant(name: str, npus: int = 20) -> Wafer:
    """One of ``fred-a .. fred-d`` (the FRED paper's table) for a wafer of ``npus`` NPUs: L1
    switches of 4 NPUs, each with the variant's uplink to the one L2.

    Raises
    ------
    SpecError
        An unknown variant, or ``npus`` that does not fill L1 switches of 4.
    """
    try:
        base = VARIANTS[name.lower()]
    except KeyError:
        raise SpecError(f"unknown FRED variant {name!r}; expected one of "
                        f"{', '.join(VARIANTS)}", key="variant") from None
    if npus == base.npus:
        return base
    if npus < 2 * base.npus_per_l1 or npus % base.npus_per_l1:
        raise SpecError(f"a FRED wafer has L1 switches of {base.npus_per_l1} NPUs and at "
                        f"least two of them; {npus} NPUs do not fit", key="npus")
    if npus > MAX_GPUS:
        raise SpecError(f"too many NPUs ({npus}); at most {MAX_GPUS}", key="npus")
    rows, cols = wafer_shape(npus)  # I/O controllers on the perimeter, as on the mesh
    return replace(base, npus=npus, l1_names=(), npu_names=(),
                   io_controllers=2 * (rows + cols))


def wafer_from_topology(topo: Topology, *, lane_Bps: float = 750e9, m: int | None = None) -> Wafer:
    """Read a two-level FRED wafer from a topology (L1 = switches next to GPUs).

    Raises
    ------
    SpecError
        If the topology is not two-level (GPUs on L1s, L1s on one L2) with equal groups.
    """
    l1_of_gpu: dict[str, str] = {}
    for g in topo.gpus:
        ups = [link.dst for link in topo.out_links(g) if not topo.node(link.dst).is_gpu]
        if len(ups) != 1:
            raise SpecError(f"GPU {g} must connect to exactly one L1 switch", file=topo.name,
                            key="links")
        l1_of_gpu[g] = ups[0]
    l1s = tuple(dict.fromkeys(l1_of_gpu[g] for g in topo.gpus))
    l2s = [s for s in topo.switches if s not in l1s]
    if len(l2s) != 1:
        raise SpecError(f"expected one L2 switch, found {l2s}", file=topo.name, key="nodes")
    sizes = {sum(1 for g in topo.gpus if l1_of_gpu[g] == s) for s in l1s}
    if len(sizes) != 1:
        raise SpecError("every L1 switch must serve the same number of GPUs", file=topo.name,
                        key="links")
    for k, s in enumerate(l1s):
        members = [topo.rank(g) for g in topo.gpus if l1_of_gpu[g] == s]
        if members != list(range(k * len(members), (k + 1) * len(members))):
            raise SpecError(f"L1 {s} must serve consecutive ranks", file=topo.name, key="links")
    g0 = topo.gpus[0]
    npu_bw = topo.link(g0, l1_of_gpu[g0]).bandwidth_Bps
    up_bw = topo.link(l1s[0], l2s[0]).bandwidth_Bps
    sw = [topo.node(s) for s in topo.switches]
    in_switch = all(n.can_reduce and n.can_copy for n in sw)
    fred_m = m or next((n.fred_m for n in sw if n.fred_m), 3)
    wafer = Wafer(topo.name, up_bw, in_switch, npus=topo.ngpus, npus_per_l1=sizes.pop(),
                  npu_Bps=npu_bw, lane_Bps=lane_Bps, m=fred_m, l1_names=l1s, l2_name=l2s[0],
                  npu_names=tuple(topo.gpus), can_reduce=all(n.can_reduce for n in sw),
                  can_copy=all(n.can_copy for n in sw))
    # latencies as the generator sets them: a wire into a switch, a wire and the
    # switch's stages out of it
    wire = topo.link(g0, l1_of_gpu[g0]).latency_s
    out = topo.link(l1_of_gpu[g0], g0).latency_s - wire
    return replace(wafer, wire_latency_s=wire,
                   uswitch_latency_s=max(0.0, out) / fred_stages(wafer.l1_ports))
