"""Independent checker of MSCCL XML algorithm files (``teccl verify``).

Reads a file the way the runtime's parser does, applies the parser's own checks and the
rules it leaves unchecked, then executes every rank and thread block symbolically.
Shares nothing with the solver or the lowering: it decides from the file alone.
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

__all__ = ["Algo", "Gpu", "Threadblock", "Step", "Finding", "Rule", "RULES", "read_msccl",
           "parse_msccl", "MscclReadError", "MscclSyntaxError", "MscclFormatError"]
