"""Independent checker of MSCCL XML algorithm files (``teccl verify``).

Reads a file the way the runtime's parser does, applies the parser's own checks and the
rules it leaves unchecked, then executes every rank and thread block symbolically.
Shares nothing with the solver or the lowering: it decides from the file alone. Every
stage is linear in the steps (line-based reading of canonical files, packed values, flat
per-GPU memory, per-GPU clocks for the race check), so 1024-GPU files with millions of
steps verify in well under a minute of CPU.

Usage::

    report = verify_msccl("allgather.xml", root=None)   # optional: max_steps=, slots=
    report.valid, [(f.rule, f.gpu, f.tb, f.step, f.message) for f in report.findings]
    algo = read_msccl("allgather.xml")   # typed Algo/Gpu/Threadblock/Step, or an error
"""

from te_ccl.verify.msccl.findings import RULES, Finding, Rule
from te_ccl.verify.msccl.model import Algo, Gpu, Step, Threadblock
from te_ccl.verify.msccl.reader import (
    MscclFormatError,
    MscclReadError,
    MscclSyntaxError,
    parse_msccl,
    read_msccl,
)
from te_ccl.verify.msccl.verify import Report, verify_msccl

__all__ = ["verify_msccl", "Report", "Algo", "Gpu", "Threadblock", "Step", "Finding", "Rule", "RULES", "read_msccl",
           "parse_msccl", "MscclReadError", "MscclSyntaxError", "MscclFormatError"]
