"""Several jobs on one network: the jobs file, the joint compile, the co-simulation of
each job's file on the shared links, and their summary."""

from te_ccl.jobs.joint import JobOutcome, JointResult, compile_jobs
from te_ccl.jobs.spec import OBJECTIVES, Job, JobSet, load_jobs

__all__ = ["OBJECTIVES", "Job", "JobSet", "JobOutcome", "JointResult", "compile_jobs",
           "load_jobs"]
