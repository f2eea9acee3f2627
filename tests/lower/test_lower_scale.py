"""Scale-backend schedules (dozens of chunks per rank, chunks held for many epochs) lower
to XML within the runtime's limits that the verifier accepts.

The torus 4×4 AllGather of the scale backend (48 chunks per rank) is the case where the
old lowering fused receives into sends 40+ epochs later and overfilled connection FIFOs:
the verifier found a FIFO deadlock.
"""

from __future__ import annotations

from collections import Counter

import pytest
from lxml import etree

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.spec.topology import load_topology


def _limits(xml: bytes) -> list[str]:
    """Every runtime limit of msccl-xml.md that the XML breaks (empty: none)."""
    bad = []
    for gpu in etree.fromstring(xml).iter("gpu"):
        g, tbs = gpu.get("id"), gpu.findall("tb")
        per_dir: Counter = Counter()
        if len(tbs) > 1024:
            bad.append(f"gpu {g}: {len(tbs)} thread blocks")
        for tb in tbs:
            steps = tb.findall("step")
            if len(steps) > 64:
                bad.append(f"gpu {g} tb {tb.get('id')}: {len(steps)} steps")
            for way in ("send", "recv"):
                if tb.get(way) != "-1":
                    per_dir[(way, tb.get("chan"), tb.get(way))] += 1
            bad += [f"gpu {g}: depid {s.get('depid')}" for s in steps if int(s.get("depid")) > 127]
        bad += [f"gpu {g}: {k} used by {n} thread blocks" for k, n in per_dir.items() if n > 1]
        per_chan = Counter((way, chan) for way, chan, _ in per_dir)
        bad += [f"gpu {g}: {n} {way} thread blocks on channel {c}"
                for (way, c), n in per_chan.items() if n > 32]
    return bad


@pytest.mark.parametrize(("topo", "kind"), [("torus4x4", "allgather"),
                                            ("mesh4x4", "allreduce")])
def test_scale_schedules_lower_within_limits_and_verify(kit, topo, kind):
    topology = load_topology(topo)
    # 12 chunks per rank: a torus takes only the 4 sub-chunks that pay
    coll = Collective(CollectiveKind(kind), 1 << 30, tuple(range(topology.ngpus)),
                      chunks_per_rank=12 if topo.startswith("torus") else 1)
    schedule = solve(topology, coll, SolveParams(backend="scale", time_limit_s=20))
    assert schedule.collective.chunks_per_rank > 16  # many chunks per link: the hard case
    xml = lower_to_msccl(schedule)
    assert _limits(xml) == []
    kit.assert_verifies(xml)
    assert lower_to_msccl(schedule) == xml
