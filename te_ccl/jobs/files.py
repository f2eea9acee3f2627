"""Each job's MSCCL file: read, verified and replayed — alone, or together with the
other jobs' files on the shared links (:func:`~te_ccl.simulate.cosim.cosimulate`).

Times here are always those of the files, replayed as the runtime runs them; the
epoch model's predictions play no part.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from te_ccl.errors import SpecError, VerificationError
from te_ccl.jobs.bound import joint_bound
from te_ccl.jobs.spec import Job, JobSet, objective_of
from te_ccl.outputs import check_input_file
from te_ccl.simulate.cosim import CoSimResult, Member, cosimulate
from te_ccl.verify.msccl import MscclReadError
from te_ccl.verify.msccl.model import Algo
from te_ccl.verify.msccl.reader import LEGACY_RULES
from te_ccl.verify.msccl.verify import verify_msccl

__all__ = ["job_file", "checked_algo", "replay_together", "replay_alone", "finish_alone",
           "simulate_jobs"]


def job_file(job: Job, directory: str | Path) -> Path:
    """The file of ``job``: its ``xml:`` if the jobs file gives one, else DIR/NAME.xml."""
    return Path(job.xml) if job.xml is not None else Path(directory) / f"{job.name}.xml"


def checked_algo(job: Job, source: str | Path | bytes) -> Algo:
    """The algorithm of ``source`` (a path, or the bytes of a file) once the verifier
    accepts it for ``job``: an error is :class:`VerificationError` (exit 1), a file of
    another GPU count or collective :class:`SpecError` (exit 2)."""
    where = str(source) if not isinstance(source, bytes) else f"{job.name}.xml"
    text = source.decode() if isinstance(source, bytes) else source
    if not isinstance(source, bytes):
        check_input_file(source)  # a device or FIFO: refused, not read
        try:
            what = (None if Path(source).is_file() else
                    "is a directory" if Path(source).is_dir() else "no such file")
        except OSError as e:  # a name too long, a loop of links
            what = f"cannot look at it ({e.strerror or e})"
        if what is not None:
            raise SpecError(f"{what}; expected the MSCCL XML of job {job.name!r}", file=where)
    coll = job.collective
    root = coll.ranks.index(coll.root) if coll.root is not None else None
    try:
        report = verify_msccl(text, root=root)
    except MscclReadError as e:  # the runtime could not load it: say why
        raise SpecError(f"job {job.name!r}: {e.reason}", file=where, key=e.key) from None
    except SpecError:  # the root's position is beyond the file's GPUs
        raise SpecError(f"the file has fewer GPUs than the {coll.nranks} ranks of job "
                        f"{job.name!r}", file=where, key="ngpus") from None
    algo = report.algo
    # a file of another job first: checked as this job's, the verifier's errors only echo it
    if algo is not None and algo.ngpus != coll.nranks:
        raise SpecError(f"the file has {algo.ngpus} GPUs, job {job.name!r} {coll.nranks} "
                        "ranks", file=where, key="ngpus")
    if algo is not None and algo.coll != coll.kind.value:
        raise SpecError(f"the file is a {algo.coll}, job {job.name!r} a {coll.kind.value}",
                        file=where, key="coll")
    errors = [f for f in report.errors if f.rule not in LEGACY_RULES]
    if algo is None or errors:
        first = (errors or report.errors)[0]
        raise VerificationError(f"{where}: the verifier rejects the file of job {job.name!r}: "
                                f"{first.where()}: {first.rule}: {first.message}")
    return algo


def _member(job: Job, algo: Algo) -> Member:
    return Member(job.name, algo, job.ranks, job.collective.size_bytes)


def replay_together(jobs: JobSet, algos: Mapping[str, Algo]) -> CoSimResult:
    """Every job's file at once on the shared links."""
    return cosimulate(jobs.topology, [_member(j, algos[j.name]) for j in jobs.jobs])


def replay_alone(jobs: JobSet, algos: Mapping[str, Algo]) -> dict[str, float]:
    """Each job's file with the network to itself."""
    return {j.name: finish_alone(jobs, j, algos[j.name]) for j in jobs.jobs}


def finish_alone(jobs: JobSet, job: Job, algo: Algo) -> float:
    """The finish of ``job``'s file ``algo`` with the network to itself."""
    return cosimulate(jobs.topology, [_member(job, algo)]).finish_s[job.name]


def simulate_jobs(jobs: JobSet, directory: str | Path | None,
                  objective: str = "weighted") -> dict[str, Any]:
    """``teccl simulate --jobs``: every job's file (any verified MSCCL XML of the job's
    size of communicator) replayed together and alone; the ``--json`` object."""
    files = {}
    for j in jobs.jobs:
        if j.xml is None and directory is None:
            raise SpecError(f"job {j.name!r} names no xml: file; pass the directory of "
                            "the jobs' files", file=jobs.file, key="xml")
        files[j.name] = job_file(j, directory or ".")
    algos = {j.name: checked_algo(j, files[j.name]) for j in jobs.jobs}
    together = replay_together(jobs, algos)
    alone = replay_alone(jobs, algos)
    rows = [{"name": j.name, "collective": j.collective.kind.value, "ranks": len(j.ranks),
             "size_bytes": j.collective.size_bytes, "weight": j.weight,
             "deadline_s": j.deadline_s,
             "deadline_met": None if j.deadline_s is None
             else together.finish_s[j.name] <= j.deadline_s,
             "together_s": together.finish_s[j.name], "alone_s": alone[j.name],
             "xml": str(files[j.name])} for j in jobs.jobs]
    return {"topology": jobs.topology.name, "objective": objective,
            "shared_links": len(together.shared_links),
            "shared": [f"{a}→{b}" for a, b in together.shared_links],
            "together": objective_of(objective, [(r["weight"], r["together_s"]) for r in rows]),
            "alone": objective_of(objective, [(r["weight"], r["alone_s"]) for r in rows]),
            "bound": joint_bound(jobs, objective).seconds, "jobs": rows}
