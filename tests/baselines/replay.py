"""A baseline measured as the runtime runs it: its schedule checked and lowered to a valid
MSCCL file, whose replay is compared with the bound."""

from te_ccl.baselines import build_baseline
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import Topology
from te_ccl.verify.msccl.reader import read_msccl
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule


def file_ratio(name: str, topology: Topology, coll: Collective) -> float:
    """The replay of baseline ``name``'s file over the bound."""
    schedule = build_baseline(name, topology, coll)
    assert check_schedule(schedule) == []
    data = lower_to_msccl(schedule).decode()
    assert verify_msccl(data).valid
    replay = simulate_msccl(read_msccl(data), topology, coll.size_bytes).finish_time_s
    return replay / lower_bound(topology, coll).seconds
