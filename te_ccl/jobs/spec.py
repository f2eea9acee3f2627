"""Load a jobs file: several collectives, each on its own communicator of one topology.

Format (``name``, ``ranks``, ``collective`` and ``size`` required)::

    jobs:
      - name: train-a                 # a file name: letters, digits, . _ + -
        ranks: [b0.g0, b0.g1, b0.g2]  # GPU names (or ranks); rank i of the job's
                                      # communicator is the i-th of them
        collective: allreduce         # any kind but custom
        size: 256MB
        chunks: 1                     # chunks per rank (default 1)
        root: b0.g0                   # rooted kinds (default: the first rank)
        weight: 2                     # weight in the weighted objective (default 1)
        deadline: 5ms                 # reported as met or missed; candidates that
                                      # miss fewer deadlines are preferred
        xml: train-a.xml              # simulate --jobs: the file to replay (default
                                      # DIR/NAME.xml); relative to the jobs file

Jobs may share GPUs (two communicators on the same GPUs, as data- and tensor-parallel
groups do): their traffic then competes for the same links, which is what the joint
compile plans for. A job's ranks must reach each other through its own GPUs and
switches, since the runtime runs each job's algorithm on that job's GPUs only.

>>> from te_ccl.spec.topology import load_topology
>>> from te_ccl.spec.yamlio import parse_yaml
>>> topo = load_topology("dgx1")
>>> text = "jobs:\\n  - {name: a, ranks: [g0, g1], collective: allgather, size: 1MB}\\n"
>>> [j.name for j in jobs_from(topo, parse_yaml(text, "j.yaml"), "j.yaml").jobs]
['a']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from te_ccl.collective.model import ROOTED, Collective, CollectiveKind
from te_ccl.outputs import path_component
from te_ccl.spec.collective import parse_ranks
from te_ccl.spec.fields import Fields, as_str, parse_size, parse_time, positive_int
from te_ccl.spec.yamlio import read_yaml
from te_ccl.topology.model import Topology

__all__ = ["OBJECTIVES", "Job", "JobSet", "load_jobs", "jobs_from", "objective_of",
           "unreachable"]

OBJECTIVES = ("max", "weighted")
_KEYS = ("name", "ranks", "collective", "size", "chunks", "root", "weight", "deadline", "xml")
MAX_NAME = 128  # a job's files are NAME.xml and alone-NAME.xml: within a file name's 255 bytes


@dataclass(frozen=True)
class Job:
    """One communicator's collective; ``collective.ranks`` are topology ranks in the
    job's own order (rank i of the job's files is ``collective.ranks[i]``)."""

    name: str
    collective: Collective
    weight: float = 1.0
    deadline_s: float | None = None
    xml: str | None = None  # a file to replay instead of DIR/NAME.xml

    @property
    def ranks(self) -> tuple[int, ...]:
        return self.collective.ranks


@dataclass(frozen=True)
class JobSet:
    """The jobs of one file, on one topology."""

    topology: Topology
    jobs: tuple[Job, ...]
    file: str | None = None

    def overlapping(self) -> list[tuple[str, str]]:
        """Pairs of jobs that share a GPU."""
        sets = [(j.name, set(j.ranks)) for j in self.jobs]
        return [(a, b) for i, (a, ra) in enumerate(sets) for b, rb in sets[i + 1:] if ra & rb]


def load_jobs(topology: Topology, path: str | Path) -> JobSet:
    """The jobs of the YAML file ``path`` on ``topology``.

    Raises
    ------
    SpecError
        One line naming the file, the line and the key: an unknown key, a rank that is
        not a GPU of the topology, two jobs of one name, a job whose ranks cannot reach
        each other through its own GPUs and switches.
    """
    return jobs_from(topology, read_yaml(path), str(path))


def jobs_from(topology: Topology, data: Any, file: str | None) -> JobSet:
    """The jobs of an already parsed document (see :func:`load_jobs`)."""
    top = Fields.of(data, file, expect="a mapping with a jobs list")
    top.check(required=("jobs",))
    jobs: list[Job] = []
    seen: dict[str, int | None] = {}
    for path, item, line in top.items("jobs"):
        f = Fields.of(item, file, path, line=line, expect="a job mapping (name, ranks, …)")
        f.check(required=("name", "ranks", "collective", "size"),
                optional=tuple(k for k in _KEYS if k not in ("name", "ranks", "collective",
                                                               "size")))
        job = _job(f, topology, file)
        if job.name in seen:
            where = f" (line {seen[job.name]})" if seen[job.name] is not None else ""
            raise f.error("name", f"job {job.name!r} is named twice; the first{where}")
        seen[job.name] = f.line("name")
        jobs.append(job)
    if not jobs:
        raise top.error("jobs", "expected at least one job")
    return JobSet(topology, tuple(jobs), file)


def _name(value: Any) -> str:
    name = as_str(value)
    if path_component(name) != name or name.endswith(".xml") or len(name) > MAX_NAME:
        shown = name if len(name) <= 40 else name[:40] + "…"
        raise ValueError(f"expected a name usable as a file name (letters, digits, . _ + -; "
                         f"at most {MAX_NAME}), got {shown!r}")
    return name


def _kind(value: Any) -> CollectiveKind:
    name = as_str(value).lower().replace("_", "").replace("-", "")
    kinds = [k.value for k in CollectiveKind if k is not CollectiveKind.CUSTOM]
    if name not in kinds:
        raise ValueError(f"expected one of: {', '.join(kinds)}; got {value!r}")
    return CollectiveKind(name)


def _gpu_ranks(topology: Topology):
    def convert(value: Any) -> tuple[int, ...]:
        if isinstance(value, str) and value != "all" and value in topology.node_by_name:
            value = [value]
        ranks = parse_ranks(topology, value)
        if len(ranks) < 2:
            raise ValueError("expected at least 2 GPUs")
        return ranks
    return convert


def _weight(value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
            or not math.isfinite(value)):
        raise ValueError(f"expected a positive number (finite), got {value!r}")
    return float(value)


def _deadline(value: Any) -> float:
    seconds = parse_time(value)
    if not seconds > 0:
        raise ValueError(f"expected a positive time such as 5ms, got {value!r}")
    return seconds


def _job(f: Fields, topology: Topology, file: str | None) -> Job:
    name = f.get("name", _name)
    kind = f.get("collective", _kind)
    ranks = f.get("ranks", _gpu_ranks(topology))
    root = None
    if f.has("root"):
        if kind not in ROOTED:
            raise f.error("root", f"{kind.value} has no root")
        root = f.get("root", lambda v: parse_ranks(topology, [v])[0])
        if root not in ranks:
            raise f.error("root", f"{topology.gpu(root)} is not one of the job's ranks")
    elif kind in ROOTED:
        root = ranks[0]
    collective = Collective(kind, f.get("size", parse_size), ranks,
                            chunks_per_rank=f.get("chunks", positive_int, 1), root=root)
    if collective.chunk_bytes <= 0:
        raise f.error("size", f"{collective.size_bytes} bytes is too small for "
                              f"{collective.nchunks} chunks")
    _check_connected(topology, ranks, f)
    xml = f.get("xml", as_str, None)
    if xml is not None and file is not None:
        xml = str(Path(file).parent / xml)
    return Job(name, collective, f.get("weight", _weight, 1.0),
               f.get("deadline", _deadline, None), xml)


def _check_connected(topology: Topology, ranks: tuple[int, ...], f: Fields) -> None:
    """The job's GPUs reach one another through its own GPUs and the switches."""
    apart = unreachable(topology, ranks)
    if apart is not None:
        raise f.error("ranks", f"{apart[0]} and {apart[1]} are not connected through the "
                               "job's own GPUs and switches (the runtime runs a job on its "
                               "GPUs only)")


def unreachable(topology: Topology, ranks: tuple[int, ...]) -> tuple[str, str] | None:
    """Two GPUs of ``ranks`` that do not reach each other (both ways) through the GPUs of
    ``ranks`` and the switches of ``topology``; None if every one does."""
    members = {topology.gpu(r) for r in ranks}
    graph = topology.graph()
    graph.remove_nodes_from(set(topology.gpus) - members)
    first = topology.gpu(ranks[0])
    reach = nx.descendants(graph, first) | {first}
    back = nx.ancestors(graph, first) | {first}
    for r in ranks:
        g = topology.gpu(r)
        if g not in reach or g not in back:
            return first, g
    return None


def objective_of(objective: str, weighted_times: list[tuple[float, float]]) -> float:
    """``max``: the latest finish (makespan); ``weighted``: the weighted sum of finish
    times, for ``(weight, finish)`` per job."""
    if objective == "max":
        return max(t for _, t in weighted_times)
    return sum(w * t for w, t in weighted_times)
