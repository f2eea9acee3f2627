"""The AllReduce plan across boxes of NVLS GPUs (te_ccl.lower.mscclpp.boxes): the plan
checker accepts it and rejects it mutated; its replay puts on each link the traffic the
module docstring counts."""

from __future__ import annotations

import copy
import json

import pytest

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import TecclError
from te_ccl.lower.mscclpp import lower_to_mscclpp
from te_ccl.lower.mscclpp.boxes import BOX_PLAN, box_allreduce_plan, box_candidate, box_shape
from te_ccl.simulate.plan import simulate_plan
from te_ccl.spec.topology import load_topology
from te_ccl.verify.mscclpp.verify import check_plan


@pytest.fixture(scope="module")
def hgx2():
    return load_topology("hgx-h100x2")


@pytest.mark.parametrize("pieces", [1, 2])
def test_the_plan_checks_and_replays_with_the_counted_traffic(hgx2, pieces):
    plan = json.loads(box_allreduce_plan(hgx2, pieces=pieces))
    report = check_plan(plan)
    assert report.valid, report.errors[:3]
    size = 1 << 20
    busy = {(u.src, u.dst): u.busy_s for u in simulate_plan(plan, hgx2, size).links}
    n, boxes = 8, 2
    # into a GPU over NVLink: its load-reduce's return and the others' multicasts of the
    # finished part, the puts of its peers and the others' multicasts of the other part
    into = size / n / boxes * (1 + (n - 1) + 2 * (n - 1)) / 450e9
    nic = size / n * 2 * (boxes - 1) / boxes / 50e9
    for g in hgx2.gpus:
        box = g.split(".")[0]
        assert busy[(f"{box}.sw", g)] == pytest.approx(into)
        rail = next(x.dst for x in hgx2.out_links(g) if x.dst.startswith("rail"))
        assert busy[(g, rail)] == pytest.approx(nic)


def test_mutated_plans_are_rejected(hgx2):
    plan = json.loads(box_allreduce_plan(hgx2, pieces=1))
    dropped = copy.deepcopy(plan)  # a gateway adds one member's value less
    block = next(tb for tb in dropped["gpus"][3]["threadblocks"]
                 if any(op["name"] == "re" and len(op["src_buff"]) > 2 for op in tb["ops"]))
    next(op for op in block["ops"] if op["name"] == "re")["src_buff"].pop()
    assert not check_plan(dropped).valid
    unsignalled = copy.deepcopy(plan)  # a lane's first signal missing
    ops = unsignalled["gpus"][5]["threadblocks"][0]["ops"]
    ops.pop(next(i for i, op in enumerate(ops) if op["name"] == "signal"))
    assert any("deadlock" in e for e in check_plan(unsignalled).errors)


def test_boxes_are_required():
    assert box_shape(load_topology("dgx-h100")) is None
    assert box_shape(load_topology("hgx-h100x4")) is not None
    with pytest.raises(TecclError, match="boxes"):
        box_allreduce_plan(load_topology("dgx-h100"))
    with pytest.raises(TecclError, match="16 boxes of 8 GPUs need 16"):
        box_allreduce_plan(load_topology("hgx-h100x16"))


def test_the_box_candidate_lowers_to_the_box_plan(hgx2):
    """The compile races the box plan through a stand-in schedule: lowered for MSCCL++,
    it is the box plan itself, named and sized as the compile asks."""
    coll = Collective(CollectiveKind.ALLREDUCE, 1 << 20, tuple(range(hgx2.ngpus)))
    schedule = box_candidate(hgx2, coll)
    assert schedule is not None and schedule.info.backend == BOX_PLAN
    data = lower_to_mscclpp(schedule, name="n", min_bytes=1024, max_bytes=1 << 30)
    assert data == box_allreduce_plan(hgx2, name="n", min_bytes=1024, max_bytes=1 << 30)
    plan = json.loads(data)
    assert (plan["min_message_size"], plan["max_message_size"]) == (1024, 1 << 30)


def test_the_box_candidate_applies_only_to_an_out_of_place_allreduce_of_every_gpu(hgx2):
    every = tuple(range(hgx2.ngpus))
    assert box_candidate(hgx2, Collective(CollectiveKind.ALLREDUCE, 1 << 20, every,
                                          inplace=True)) is None
    assert box_candidate(hgx2, Collective(CollectiveKind.ALLGATHER, 1 << 20, every)) is None
    assert box_candidate(hgx2, Collective(CollectiveKind.ALLREDUCE, 1 << 20, every[:8])) is None
    dgx = load_topology("dgx-h100")
    assert box_candidate(dgx, Collective(CollectiveKind.ALLREDUCE, 1 << 20,
                                         tuple(range(8)))) is None


def test_the_judge_times_the_box_candidate_by_the_box_plans_replay(hgx2):
    from te_ccl.compiler import CompileOptions, Timer

    timer = Timer(options=CompileOptions(fmt="mscclpp"))
    coll = Collective(CollectiveKind.ALLREDUCE, 1 << 24, tuple(range(hgx2.ngpus)))
    timing = timer.timing(box_candidate(hgx2, coll))
    assert timing.measured_by == "plan replay"
    plan = json.loads(box_allreduce_plan(hgx2))
    assert timing.plan_s == simulate_plan(plan, hgx2, 1 << 24).finish_time_s


@pytest.mark.slow
def test_compile_races_the_box_plan_and_reports_its_replay(tmp_path, hgx2):
    """``--format mscclpp`` on boxes of NVLS GPUs races the box plan; it wins here, and
    the ratio the compile reports is the written plan's replay."""
    import te_ccl

    out = tmp_path / "p.json"
    result = te_ccl.compile(hgx2, "allreduce", size="1GB", fmt="mscclpp", output=out,
                            time_limit_s=20)
    assert result.schedule.info.backend == BOX_PLAN
    assert result.measured_by == "plan replay" and result.file_replayed
    written = json.loads(out.read_bytes())
    assert written["gpus"] == json.loads(box_allreduce_plan(hgx2))["gpus"]
    assert result.finish_time_s == simulate_plan(written, hgx2, 10**9).finish_time_s
