"""Lower a :class:`~te_ccl.schedule.Schedule` to an MSCCL++ execution plan (JSON).

Passes, one per module, in the order :mod:`passes` runs them: :mod:`trace` (which GPU
sends make each value a GPU receives, sums formed in the switch fabric included),
:mod:`program` (steps per GPU on slots written once), :mod:`threadblocks` (lanes, thread
blocks, semaphores, ``nop``), :mod:`to_json` (the executor's format). Ranks in one box
(``find_boxes``: the topology's ``box_gpus``, or GPU names ``b<i>.<gpu>``) talk over
memory channels (CUDA IPC), ranks in different boxes over port channels (the host proxy:
IB or Ethernet). See docs/runtimes.md for the format version.
:mod:`boxes` writes one plan without a schedule: AllReduce across boxes of NVLS GPUs
(raced by the compile as :func:`box_candidate`, whose schedule lowers to that plan).
"""

from te_ccl.lower.mscclpp.boxes import box_allreduce_plan, box_candidate
from te_ccl.lower.mscclpp.passes import lower_to_mscclpp
from te_ccl.lower.mscclpp.program import SUPPORTED

__all__ = ["SUPPORTED", "lower_to_mscclpp", "box_allreduce_plan", "box_candidate"]
