"""An independent checker of MSCCL++ execution plans (JSON); shares nothing with the
lowering. :func:`verify_plan` reads, pairs, executes symbolically and compares."""

from te_ccl.verify.mscclpp.verify import PlanReport, looks_like_plan, verify_plan

__all__ = ["PlanReport", "verify_plan", "looks_like_plan"]
