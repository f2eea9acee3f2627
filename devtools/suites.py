"""The benchmark suites: which topologies, collectives and sizes ``python -m devtools.bench`` runs.

``default`` is what ``make bench`` runs (budgeted to finish in under 20 minutes on 2
cores: every solve has its own time limit and the suite stops starting new cases when its
budget is spent, so the headline rows — the solver targets, the scale table, NDv2 ×2
for the anchors — come first); ``quick`` is a seconds-long subset for tests;
``defaults`` and ``defaults-first`` are the defaults matrix (:func:`_defaults_cases`,
the second also in ``make bench``). Sizes are decimal
(``1KB`` = 1000 bytes) like the targets, except the scale rows, which follow the
published TACOS comparison at 1 GiB. ``bound`` is :data:`BOUND_GOALS`' rows, among them
:data:`ROOTED_ROWS` (every shipped topology's rooted collectives of 64 MB, each judged on
its own); ``default`` has those but the AlltoAll ones, which take up to the default time
limit each, and :data:`ROOTED_ROWS`, which ``make bench`` runs in the ``bound`` suite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ALLTOALL_GOAL", "BOUND_GOALS", "ROOTED_GOAL", "ROOTED_KINDS", "ROOTED_ROWS",
           "SMALL_ALLTOALL_GOAL", "Case", "Suite", "SUITES", "only", "suite"]

KB, MB, GB, GiB = 10**3, 10**6, 10**9, 2**30


@dataclass(frozen=True)
class Case:
    """One collective on one topology; ``group``: ``suite``, ``target`` or ``scale``.

    teccl runs as ``teccl compile`` with ``backend`` and ``epoch`` (``auto`` picks the
    scale backend beyond 16 GPUs) and, if ``auto_chunks``, ``--chunks auto`` (``chunks``
    then only names the case; the baselines use it); else with ``chunks`` per rank.
    """

    topology: str
    kind: str
    size_bytes: int
    chunks: int = 1
    limit_s: float = 30.0
    baselines: bool = True
    group: str = "suite"
    root: int | None = None
    backend: str = "auto"
    epoch: str = "fastest"
    auto_chunks: bool = False
    first_file_only: bool = False  # defaults rows: stop the compile at its first file


@dataclass(frozen=True)
class Suite:
    name: str
    cases: tuple[Case, ...]
    budget_s: float


SIZES = (1 * KB, 64 * KB, 1 * MB, 16 * MB, 1 * GB)
SMALL = ("dgx1", "ring8", "fc8", "mesh4x4", "torus4x4")


def _suite_cases(topologies: tuple[str, ...], limit_s: float) -> list[Case]:
    cases = [Case(t, "allgather", s, limit_s=limit_s, auto_chunks=True)
             for t in topologies for s in SIZES]
    for kind in ("reducescatter", "allreduce", "alltoall", "broadcast"):
        root = 0 if kind == "broadcast" else None
        cases += [Case(t, kind, s, limit_s=limit_s, root=root, auto_chunks=True)
                  for t in topologies for s in (1 * KB, 1 * GB)]
    return cases


def _target_cases() -> list[Case]:
    """The solver targets' rows: small topologies with 1 and 2 chunks per GPU (MILP, 10 s), and the
    NDv2 instances with the solver's own settings (rounds, 4 chunks per GPU)."""
    cases = [Case(t, kind, GB, chunks=c, limit_s=10, baselines=False, group="target",
                  root=0 if kind == "broadcast" else None, backend="milp")
             for t in SMALL for kind in ("allgather", "broadcast") for c in (1, 2)]
    cases.append(Case("ndv2x2", "allgather", GB, chunks=4, limit_s=30, group="target",
                      backend="rounds"))
    cases.append(Case("ndv2x4", "allgather", GB, chunks=4, limit_s=120, group="target",
                      backend="rounds", epoch="slowest"))
    return cases


def _scale_cases() -> list[Case]:
    """The scale table at 1 GiB, each with a limit near its target budget."""
    rows = [("mesh8x8", 5), ("torus8x8", 5), ("mesh16x16", 20), ("torus16x16", 20),
            ("torus8x8x8", 60), ("mesh32x32", 60), ("torus32x32", 60)]
    cases = [Case(t, "allgather", GiB, limit_s=lim, baselines=False, group="scale") for t, lim in rows]
    cases.append(Case("rail8x8", "alltoall", GiB, limit_s=60, baselines=False, group="scale"))
    cases += [Case(t, kind, GiB, limit_s=lim, baselines=False, group="scale")
              for t, lim in rows for kind in ("reducescatter", "allreduce")]
    return cases


# (topology, collective, size) -> ratio goal to the valid lower bound: rooted collectives
# on switch fabrics (pipelined packed trees, flow paths into the root) and AllReduce
# reduced along trees where ReduceScatter + AllGather stays far from the bound
BOUND_GOALS: dict[tuple[str, str, int], float] = {
    ("hgx-h100x2", "broadcast", 256 * MB): 1.10, ("aws-p4dx2", "broadcast", 256 * MB): 1.10,
    ("ndv2x2", "gather", 256 * MB): 1.10, ("hgx-h100x2", "scatter", 256 * MB): 1.10,
    ("mesh4x4", "allreduce", GB): 1.10, ("wafer-mesh5x4", "allreduce", GB): 1.10,
}
ALLTOALL_GOAL = 1.01  # AlltoAll of 64 MB and 1 GB on these machines, meshes and tori
ALLTOALL_TOPOLOGIES = ("ndv2x2", "ndv2x4", "dgx2x2", "mesh4x4", "torus4x4", "mesh8x8",
                       "torus8x8", "mesh16x16", "torus16x16", "torus8x8x8")
BOUND_GOALS |= {(t, "alltoall", s): ALLTOALL_GOAL
                for t in ALLTOALL_TOPOLOGIES for s in (64 * MB, GB)}
SMALL_ALLTOALL_GOAL = 1.05  # AlltoAll of 1 KB and 64 KB on the 8-32-GPU machines
SMALL_ALLTOALL_TOPOLOGIES = ("ndv2x2", "ndv2x4", "dgx1", "dgx2", "dgx2x2", "hgx-h100x2",
                             "hgx-h100x4", "aws-p4dx2", "aws-p5x2", "mesh4x4", "torus4x4")
BOUND_GOALS |= {(t, "alltoall", s): SMALL_ALLTOALL_GOAL
                for t in SMALL_ALLTOALL_TOPOLOGIES for s in (KB, 64 * KB)}


ROOTED_GOAL = 1.10  # every shipped topology's rooted collectives of 64 MB: the file's replay
#                    over the valid lower bound
ROOTED_KINDS = ("broadcast", "reduce", "gather", "scatter")


def _shipped_names() -> list[str]:
    """The shipped topologies' names, read off their files without importing te_ccl (so
    importing the suites loads no topology)."""
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("te_ccl")
    if spec is None or not spec.submodule_search_locations:
        return []
    data = Path(next(iter(spec.submodule_search_locations))) / "data" / "topologies"
    return sorted(p.stem for p in data.glob("*.yaml"))


ROOTED_ROWS = {(t, kind, 64 * MB): ROOTED_GOAL for t in _shipped_names() for kind in ROOTED_KINDS}
BOUND_GOALS |= ROOTED_ROWS


def _whole_suite(name: str, cases: list[Case]) -> Suite:
    """A suite whose budget is its rows' limits and a fifth more (each row's checks and
    replays after its limit), so no row is skipped for the budget and read as missed."""
    return Suite(name, tuple(cases), budget_s=1.2 * sum(c.limit_s for c in cases))


def _bound_cases() -> list[Case]:
    """:data:`BOUND_GOALS`' rows (group ``bound``), one chunk per GPU: the templates
    that reach these bounds cut their own pieces. AlltoAll and :data:`ROOTED_ROWS` at the
    default time limit, the one their goals are stated at (a rooted template's finer
    pipeline is built only where the time left allows it)."""
    at_default = {(t, k, s) for t, k, s in BOUND_GOALS if k == "alltoall"} | set(ROOTED_ROWS)
    return [Case(t, kind, size,
                 limit_s=DEFAULTS_LIMIT_S if (t, kind, size) in at_default else 10,
                 baselines=False, group="bound",
                 root=0 if kind in ROOTED_KINDS else None)
            for t, kind, size in BOUND_GOALS]


def _rooted_cases() -> list[Case]:
    """:data:`ROOTED_ROWS` from root 0 (group ``rooted``), the smallest machines first, at
    the limit the ``bound`` suite runs them at (:func:`_bound_cases`)."""
    from te_ccl.spec.topology import load_topology

    ngpus = {t: load_topology(t).ngpus for t, _, _ in ROOTED_ROWS}
    return [Case(t, kind, size, limit_s=DEFAULTS_LIMIT_S, baselines=False, group="rooted",
                 root=0)
            for t, kind, size in sorted(ROOTED_ROWS, key=lambda r: (ngpus[r[0]], r[0]))]


DEFAULTS_SIZES = (1 * KB, 1 * MB, 64 * MB, 1 * GB)
DEFAULTS_LIMIT_S = 60.0  # teccl compile's --time-limit default


def _defaults_cases(first_file_only: bool) -> list[Case]:
    """Every shipped topology × every collective × :data:`DEFAULTS_SIZES`, compiled as
    ``teccl compile TOPOLOGY -c KIND -s SIZE -o FILE`` with nothing else given (group
    ``defaults``): the default time limit must give every row a verified file.

    Run to the end (suite ``defaults``), a row takes up to the whole limit, since the
    search goes on while it improves: the matrix takes hours, one row after another
    (two cores cannot run rows side by side without slowing each, and a shorter limit
    would not be the default's behaviour). So ``make bench`` runs ``defaults-first``:
    the same rows at the same limit, each stopped at its first verified file, which
    decides whether the row exits 3 (a file kept is always written) and gives its
    time-to-first-file and the first file's ratio; ``defaults`` gives the final ratios.
    """
    from te_ccl.collective.model import CollectiveKind
    from te_ccl.spec.topology import shipped_topologies

    kinds = [k.value for k in CollectiveKind if k is not CollectiveKind.CUSTOM]
    return [Case(t, kind, size, limit_s=DEFAULTS_LIMIT_S, baselines=False, group="defaults",
                 first_file_only=first_file_only)
            for t in shipped_topologies() for kind in kinds for size in DEFAULTS_SIZES]


# each suite's rows, built when asked for (the rooted and defaults suites load every
# shipped topology)
SUITES: dict[str, Callable[[], Suite]] = {
    "default": lambda: Suite("default",
                             tuple(_target_cases() + _scale_cases()
                                   + _suite_cases(("ndv2x2",) + SMALL, 10)
                                   + [Case("rail8x8", "allgather", s, limit_s=10,
                                           auto_chunks=True) for s in (KB, MB, GB)]
                                   + [c for c in _bound_cases() if c.kind != "alltoall"
                                      and (c.topology, c.kind, c.size_bytes) not in ROOTED_ROWS]),
                             budget_s=17 * 60),
    "bound": lambda: _whole_suite("bound", _bound_cases()),
    "rooted": lambda: _whole_suite("rooted", _rooted_cases()),
    "quick": lambda: Suite("quick",
                           (Case("ring8", "allgather", 1 * KB, limit_s=5),
                            Case("ring8", "allgather", 1 * MB, limit_s=5),
                            Case("fc8", "allreduce", 1 * MB, limit_s=5),
                            Case("mesh4x4", "broadcast", 64 * KB, limit_s=5, root=0)),
                           budget_s=120),
    "defaults": lambda: Suite("defaults", tuple(_defaults_cases(False)),
                              budget_s=float("inf")),
    "defaults-first": lambda: Suite("defaults-first", tuple(_defaults_cases(True)),
                                    budget_s=float("inf")),
}


def suite(name: str) -> Suite:
    """The suite called ``name``; raises SpecError listing the known ones."""
    from te_ccl.errors import SpecError

    if name not in SUITES:
        raise SpecError(f"unknown suite {name!r}; expected one of {', '.join(SUITES)}",
                        key="SUITE")
    return SUITES[name]()


def only(chosen: Suite, topologies: tuple[str, ...] = (), sizes: tuple[int, ...] = (),
         kinds: tuple[str, ...] = ()) -> Suite:
    """``chosen``'s rows on ``topologies``, of ``sizes`` (bytes) and of the collective
    ``kinds`` (any empty: all); one the suite has no row of is a SpecError."""
    from te_ccl.errors import SpecError

    for key, asked, known in (("--topology", topologies, {c.topology for c in chosen.cases}),
                              ("--size", sizes, {c.size_bytes for c in chosen.cases}),
                              ("--collective", kinds, {c.kind for c in chosen.cases})):
        unknown = [x for x in asked if x not in known]
        if unknown:
            raise SpecError(f"suite {chosen.name} has no row on {unknown[0]!r}", key=key)
    return Suite(chosen.name, tuple(c for c in chosen.cases
                                    if (not topologies or c.topology in topologies)
                                    and (not sizes or c.size_bytes in sizes)
                                    and (not kinds or c.kind in kinds)),
                 chosen.budget_s)
