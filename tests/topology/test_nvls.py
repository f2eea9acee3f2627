"""NVLink SHARP switches: where they are, what limits the YAML enforces, which output
drives them, and what the bound and the flow model make of them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import drives_in_switch, forward_only
from te_ccl.errors import SpecError
from te_ccl.spec.topology import load_topology, topology_from_data
from te_ccl.spec.yamlio import parse_yaml
from te_ccl.topology.generators import SwitchCaps, star

NVLS_MACHINES = ("dgx-h100", "hgx-h100x2", "hgx-h100x4", "hgx-h100x16", "gb200-nvl72")


@pytest.mark.parametrize("name", NVLS_MACHINES)
def test_nvls_on_the_nvswitch_of_each_nvlink_domain_only(name: str) -> None:
    topo = load_topology(name)
    nvls = [topo.node(s) for s in topo.switches if topo.node(s).nvls]
    assert nvls and all(n.can_copy and n.can_reduce for n in nvls)
    # the box NVSwitches (sw, b0.sw, …) have NVLS, linked to GPUs only; rail switches not
    assert [n.name for n in nvls] == [s for s in topo.switches if s.split(".")[-1] == "sw"]
    assert all(topo.node(k.dst).is_gpu for n in nvls for k in topo.out_links(n.name))
    assert topo.reducing_switches == ()  # MSCCL XML may still be written for it


def _load(switches: str, links: str) -> object:
    text = f"gpus: [a, b, c]\nswitches: [{switches}]\nlinks: [{links}]\n"
    return topology_from_data(parse_yaml(text, "t.yaml"), "t.yaml")


def test_nvls_yaml_key_implies_copy_and_reduce() -> None:
    topo = _load("{name: s, nvls: true}", "{between: [a, s], bandwidth: 1GB/s}, "
                 "{between: [b, s], bandwidth: 1GB/s}, {between: [c, s], bandwidth: 1GB/s}")
    node = topo.node("s")
    assert (node.nvls, node.can_copy, node.can_reduce) == (True, True, True)


@pytest.mark.parametrize("switches, links, expect", [
    ("{name: s, nvls: true, reduce: false}", "{between: [a, s], bandwidth: 1GB/s}",
     "copies and reduces"),
    ("{name: s, nvls: true, fred: {m: 3}}", "{between: [a, s], bandwidth: 1GB/s}",
     "either NVLink SHARP"),
    ("{name: s, nvls: true}, {name: nic, copy: false}",
     "{between: [a, s], bandwidth: 1GB/s}, {between: [b, s], bandwidth: 1GB/s}, "
     "{between: [s, nic], bandwidth: 1GB/s}, {between: [c, nic], bandwidth: 1GB/s}",
     "links only to GPUs"),
    ("{name: s, nvls: true}, {name: t, nvls: true}",
     "{between: [a, s], bandwidth: 1GB/s}, {between: [b, s], bandwidth: 1GB/s}, "
     "{between: [b, t], bandwidth: 1GB/s}, {between: [c, t], bandwidth: 1GB/s}",
     "one multicast group"),
])
def test_nvls_limits_are_one_spec_error(switches: str, links: str, expect: str) -> None:
    with pytest.raises(SpecError, match=expect):
        _load(switches, links)


def test_the_yaml_writer_keeps_nvls(tmp_path: Path) -> None:
    from te_ccl.importers.yaml_out import topology_yaml

    path = tmp_path / "d.yaml"
    path.write_text(topology_yaml(load_topology("dgx-h100"), []))
    assert load_topology(str(path)).node("sw").nvls


def test_which_output_drives_which_switch() -> None:
    nvls = load_topology("dgx-h100").node("sw")
    fred = load_topology("fred-b").node("L2")
    assert [drives_in_switch(f, nvls) for f in ("xml", "json", "mscclpp")] == [False, True, True]
    assert [drives_in_switch(f, fred) for f in ("xml", "json", "mscclpp")] == [False, True, False]
    both = load_topology("dgx-h100")
    both = replace(both, nodes=both.nodes + (replace(fred, name="f"),))
    kept = forward_only(both, "mscclpp")
    assert kept.node("sw").can_reduce and not kept.node("f").can_reduce
    assert not forward_only(both).node("sw").can_copy


def test_the_bound_holds_the_nvls_sum_to_the_hardware() -> None:
    """AllReduce of D on n GPUs at B each way: 2(n-1)/n · D/B when the switch only
    forwards; with NVLS, D(n²-2)/(n(n-1)B) (te_ccl.bounds, nvls_s), above the D/B of a
    switch that keeps the sum (FRED's)."""
    topo, size = load_topology("dgx-h100"), 10**9
    coll = Collective(CollectiveKind.ALLREDUCE, size, tuple(range(8)))
    assert lower_bound(topo, coll).seconds == pytest.approx(62 / 56 * size / 450e9)
    assert lower_bound(forward_only(topo), coll).seconds == pytest.approx(1.75 * size / 450e9)
    reducing = star(8, 450e9, 0.7e-6, switch=SwitchCaps(copy=True, reduce=True))
    assert lower_bound(reducing, coll).seconds == pytest.approx(size / 450e9)


def test_allreduce_with_nvls_is_judged_by_its_plan_and_beats_any_forwarding_one() -> None:
    """A compile for an MSCCL++ plan on dgx-h100 is timed by the plan's replay, which
    no plan beats the NVLS bound, and it uses the switch: faster than the bound of
    every schedule that only forwards. One backend and chunking, so the schedule does
    not depend on how much of a time limit the machine's load leaves."""
    import te_ccl

    coll = Collective(CollectiveKind.ALLREDUCE, 10**9, tuple(range(8)))
    topo = load_topology("dgx-h100")
    result = te_ccl.compile(topo, coll, fmt="mscclpp", backend="rounds", chunks=1,
                            time_limit_s=600)
    assert result.timing.measured_by == "plan replay"
    assert result.finish_time_s >= lower_bound(topo, coll).seconds
    assert lower_bound(forward_only(topo), coll).seconds >= 1.3 * result.finish_time_s


def test_writing_a_plan_stops_at_the_compile_deadline() -> None:
    """Lowering a schedule to an MSCCL++ plan and checking the plan count in the
    compile's time limit (te_ccl.deadline): past it, both stop with exit 3's error."""
    import time

    from te_ccl.baselines import BASELINES
    from te_ccl.deadline import TimeLimitReached, until
    from te_ccl.lower.mscclpp import lower_to_mscclpp
    from te_ccl.verify.mscclpp import verify_plan

    topo = load_topology("dgx-h100")
    schedule = BASELINES["ring"](topo, Collective(CollectiveKind.ALLREDUCE, 1 << 20,
                                                  tuple(range(8))))
    data = lower_to_mscclpp(schedule)
    with until(0.0):
        time.sleep(0.001)
        with pytest.raises(TimeLimitReached, match="lowering to an MSCCL\\+\\+ plan"):
            lower_to_mscclpp(schedule)
        with pytest.raises(TimeLimitReached, match="checking the MSCCL\\+\\+ plan"):
            verify_plan(data.decode())
