"""Lower a :class:`~te_ccl.schedule.Schedule` to an MSCCL XML algorithm.

The passes, one module each, in the order :mod:`~te_ccl.lower.msccl.passes` runs them:
:mod:`collapse_switches`, :mod:`retime`, :mod:`instructions` (on the slots of
:mod:`buffers`), :mod:`channels`, :mod:`threadblocks`, :mod:`dependencies`,
:mod:`to_xml`; :mod:`parallel` deals the per-GPU passes over processes.
"""

from te_ccl.lower.msccl.collapse_switches import check_expressible
from te_ccl.lower.msccl.passes import StepsExhausted, build_program, lower_to_msccl, write_msccl
from te_ccl.runtime_limits import PROTOCOLS

__all__ = ["PROTOCOLS", "StepsExhausted", "build_program", "check_expressible", "lower_to_msccl",
           "write_msccl"]
