"""An independent checker of MSCCL++ execution plans (JSON); shares nothing with the
lowering. :func:`verify_plan` reads, pairs, executes symbolically and compares."""

from te_ccl.verify.mscclpp.verify import (
    PlanReport,
    is_plan_file,
    plan_json,
    verify_plan,
    verify_plan_file,
)

__all__ = ["PlanReport", "verify_plan", "verify_plan_file", "is_plan_file", "plan_json"]
