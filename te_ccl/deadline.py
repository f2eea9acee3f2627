"""The wall-clock deadline of the compile under way, checked by every long stage.

Building a time-expanded model is pure Python and can take longer than solving it, and
at 1024 GPUs so can lowering a schedule to MSCCL XML, verifying and replaying the file:
a time limit must count them all. Whoever owns the limit enters :func:`until` around
everything it runs (:func:`te_ccl.compiler.solve.solve` for the solve; a whole compile for the
lowering and checks after it), the loops of each stage call :func:`check` (or iterate
through :func:`checked`) naming what they do, and the solvers get only the time still
left (:func:`left`). Outside :func:`until` the checks cost a context-variable read.
A stage that shares its time out (the search among its candidates) takes a
:class:`Budget`: a share that ends no later than the deadline; :func:`keeping` ends a
body early, keeping time for what must follow it (writing the file kept). How much each
stage takes is in one place, :data:`SHARES`, so the trades between them read side by side.
A module of its own, at the bottom of the layers: the
verifier and the replay look at the clock without importing anything of the solver.

>>> with until(3600.0):
...     check()
...     0 < left() <= 3600
True
>>> with until(0.0):
...     check("lowering to MSCCL XML")
Traceback (most recent call last):
...
te_ccl.deadline.TimeLimitReached: time limit of 0 s reached while lowering to MSCCL XML
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from typing import TypeVar

from te_ccl.errors import SolverError

__all__ = ["until", "check", "left", "checked", "keeping", "hurried", "in_hurry", "skipping",
           "process_start", "cpu_s", "slowdown", "forked", "reaped", "in_child", "Budget",
           "TimeLimitReached", "TimeShares", "SHARES"]

T = TypeVar("T")
# (end, the limit its messages name, (clock, CPU seconds) when the outermost one began)
_DEADLINE: ContextVar[tuple[float, float, tuple[float, float]] | None] = ContextVar(
    "deadline", default=None)
_HURRIED: ContextVar[list[str] | None] = ContextVar("hurried", default=None)
EVERY = 4096  # items between two clock reads in :func:`checked`
MODEL = "building the model"
_LIVE: set[int] = set()  # children forked and not reaped yet (:func:`forked`)
_AT_FORK = [0.0]  # in a forked child: the CPU seconds of its parents when it was forked


class TimeLimitReached(SolverError):
    """The deadline passed in a stage (exit code 3, as a solver giving up): not a fault
    of the input, so callers that try alternatives must not take it for one.
    ``limit_named``: the message already says which ``--time-limit`` would do."""

    def __init__(self, message: str = "", *, limit_named: bool = False) -> None:
        super().__init__(message)
        self.limit_named = limit_named


@contextmanager
def until(limit_s: float, since: float | None = None) -> Iterator[None]:
    """Everything run inside must end within ``limit_s`` seconds from now, or from
    ``since`` (a ``time.monotonic()``, such as :func:`process_start`'s); an outer, earlier
    deadline still holds."""
    now = time.monotonic()
    end = (now if since is None else since) + limit_s
    outer = _DEADLINE.get()
    # the CPU counted as slowdown counts it: a forked child's includes its parents'
    token = _DEADLINE.set((end, limit_s, (now, cpu_s() + _AT_FORK[0])) if outer is None else
                          (min(outer[0], end), outer[1], outer[2]))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@contextmanager
def keeping(seconds: float) -> Iterator[None]:
    """Everything run inside ends ``seconds`` before the deadline (none: no limit), which
    are kept for what follows the body; its messages still name the whole limit."""
    with until(max(0.0, left() - seconds)):
        yield


@contextmanager
def hurried() -> Iterator[list[str]]:
    """Everything run inside is wanted soon rather than good (a compile's first file): a
    stage skips what only improves its result (:func:`skipping`), since the search that
    follows can run it. Yields the list of what was skipped.

    >>> with hurried() as skipped:
    ...     skipping("the improvement")
    True
    >>> skipped, skipping("the improvement")
    (['the improvement'], False)
    """
    skipped: list[str] = []
    token = _HURRIED.set(skipped)
    try:
        yield skipped
    finally:
        _HURRIED.reset(token)


def in_hurry() -> bool:
    """Whether this runs inside :func:`hurried` (asked before building a cheap stand-in
    that only a hurried stage keeps; :func:`skipping` then records what it skips)."""
    return _HURRIED.get() is not None


def skipping(what: str) -> bool:
    """Whether to skip ``what``, an improvement of a result: inside :func:`hurried`,
    which then records it."""
    skipped = _HURRIED.get()
    if skipped is not None:
        skipped.append(what)
    return skipped is not None


@dataclass(frozen=True)
class Budget:
    """A share of the time: ``seconds`` from its start, never past the deadline.

    >>> with until(3600.0):
    ...     share = Budget.of(10.0)
    ...     0 < share.left() <= 10 and not share.spent and 0 <= share.elapsed() < 10
    True
    """

    end: float  # time.monotonic() at which the share is spent
    start: float = field(default_factory=lambda: time.monotonic())  # read at call time, as the deadline reads it

    @classmethod
    def of(cls, seconds: float) -> Budget:
        now = time.monotonic()
        return cls(now + min(seconds, left()), now)

    def left(self) -> float:
        """Seconds of the share left (0 once spent)."""
        return max(0.0, self.end - time.monotonic())

    def elapsed(self) -> float:
        """Seconds since the share began: what a stage that took it reports it spent."""
        return time.monotonic() - self.start

    @property
    def spent(self) -> bool:
        return time.monotonic() > self.end


def _share(value: float, stage: str, trades: str) -> float:
    """A field of :class:`TimeShares`: its value, the module that takes it and what it
    trades (the docs' table of shares is made from these)."""
    return field(default=value, metadata={"stage": stage, "trades": trades})


@dataclass(frozen=True)
class TimeShares:
    """How a compile divides its time: each field is the fraction of the time (of the limit
    or of the time left, as its text says) one stage may take; what follows it gets the
    rest. Each stage asks :data:`SHARES`, so changing a trade is one line here.

    >>> from dataclasses import replace
    >>> SHARES.search, replace(SHARES, finalist=0).finalist
    (0.8, 0)
    """

    search: float = _share(0.8, "compiler/pipeline.py", "of one compile's time left, for its "
                           "search; the rest lowers, checks and writes the file it keeps")
    tables: float = _share(0.25, "compiler/pipeline.py", "of a compile's limit with "
                           "--fred-tables, kept from its end for the switch tables (more if "
                           "the first file's take longer by estimate)")
    ranges: float = _share(0.7, "compiler/sizes.py", "of a --sizes library's time left, for "
                           "the searches of all its ranges; the rest lowers and verifies them")
    scale: float = _share(0.25, "compiler/portfolio.py", "of the search, for the scale backend "
                          "when the flow model runs after it")
    trees: float = _share(0.5, "compiler/portfolio.py", "the same for packed trees, which land "
                          "nearer the bound than the flow model does")
    templates: float = _share(0.2, "compiler/portfolio.py", "of the search's time left, kept "
                              "from the flow model to build and judge the templates")
    finalist: float = _share(0.25, "compiler/judge.py", "of the time left, the most lowering "
                             "and replaying one finalist's file may take; slower, its "
                             "schedule's replay judges it")
    bound_lp: float = _share(0.1, "bounds.py", "of the time left, the most the AlltoAll "
                             "bound's LP may take; the first file comes first")
    fine_trees: float = _share(0.5, "baselines/disjoint.py", "of the time left, the most "
                               "building the finest pipelined trees may take by estimate")
    incumbent: float = _share(0.5, "backends/milp.py", "of the MILP's time left, for a quick "
                              "rounds run bounding the horizon from above")
    polish: float = _share(0.25, "backends/milp.py", "of the limit, for the deliver-early "
                           "polish once the horizon is minimal")
    job_solve: float = _share(0.7, "jobs/flow.py", "of a joint candidate's limit, for its "
                              "solve; the rest lowers and verifies it")
    job_form: float = _share(0.5, "jobs/mix.py", "of a job mix's time left, for compiling "
                             "one job's form in its own chunks")
    reduction: float = _share(0.5, "backends/flow.py", "of an AllReduce flow model's time "
                              "left, for its reduction; gathering the sums gets the rest")
    torus_orbit: float = _share(1 / 3, "backends/scale/torus.py", "of the torus orbit's time "
                                "left (20 s at most), for CP-SAT to improve its list schedule")

    def __post_init__(self) -> None:
        for f in fields(self):
            if not 0 <= getattr(self, f.name) <= 1:
                raise ValueError(f"TimeShares.{f.name} is a fraction of the time, "
                                 f"not {getattr(self, f.name)}")


SHARES = TimeShares()


def process_start() -> float:
    """When this process started, as a ``time.monotonic()`` (now where the system does not
    say): a command's time limit counts the interpreter's start and imports too."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return now - min(60.0, max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK")))
    except (OSError, ValueError, IndexError, AttributeError):
        return now


def cpu_s() -> float:
    """CPU seconds of this process and the children it waited for (to the microsecond:
    ``os.times`` counts whole clock ticks, 0 for a short row's compile)."""
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def forked(pid: int) -> None:
    """The process forked child ``pid`` (:mod:`te_ccl.background` says so): until it is
    :func:`reaped`, which :func:`cpu_s` counts from then on, :func:`slowdown` reads its
    CPU from ``/proc`` (where there is none, a child's CPU counts once reaped)."""
    _LIVE.add(pid)


def reaped(pid: int) -> None:
    """Child ``pid`` was waited for: :func:`cpu_s` counts it now."""
    _LIVE.discard(pid)


def in_child(parent_cpu_s: float) -> None:
    """This process was just forked by one that had used ``parent_cpu_s`` CPU seconds
    (:func:`cpu_s`): its own count starts at 0, and the deadline it inherited counts from
    the parent's, which adds what the parent's own parents had used when it was forked
    (a child of a forked lowering counts the compile's CPU before that fork too)."""
    _LIVE.clear()
    _AT_FORK[0] += parent_cpu_s


def _live_cpu_s() -> float:
    """CPU seconds of the children not reaped yet (and of theirs they reaped)."""
    total = 0
    for pid in tuple(_LIVE):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except (OSError, ValueError, IndexError):  # gone (reaped), or no /proc here
            continue
    return total / os.sysconf("SC_CLK_TCK") if total else 0.0


def slowdown() -> float:
    """Wall seconds per CPU second of this process and its children (those it forked
    while they run, :func:`forked`, then those it waited for) since the outermost
    :func:`until` began (without one, since the process started), at least 1: on a
    loaded machine a stage estimated in CPU seconds takes this many times longer by the
    clock the deadline reads. A child forked under the deadline counts its parent's CPU
    before the fork too (:func:`in_child`). From the deadline, not the process's start: a
    process idle before it (a notebook, a server calling :func:`te_ccl.compile`) is not
    a slow machine."""
    d = _DEADLINE.get()
    since, cpu_then = (process_start(), _AT_FORK[0]) if d is None else d[2]
    cpu = cpu_s() + _AT_FORK[0] + _live_cpu_s() - cpu_then
    return max(1.0, (time.monotonic() - since) / cpu) if cpu > 0 else 1.0


def left() -> float:
    """Seconds until the deadline (infinite without one)."""
    d = _DEADLINE.get()
    return float("inf") if d is None else max(0.0, d[0] - time.monotonic())


def check(doing: str = MODEL) -> None:
    """Raise :class:`TimeLimitReached`, saying the stage was ``doing``, once the
    deadline has passed."""
    d = _DEADLINE.get()
    if d is not None and time.monotonic() > d[0]:
        raise TimeLimitReached(f"time limit of {d[1]:g} s reached while {doing}")


def checked(items: Iterable[T], doing: str = MODEL, every: int = EVERY) -> Iterator[T]:
    """``items``, checking the deadline every ``every`` of them."""
    for i, item in enumerate(items):
        if i % every == 0:
            check(doing)
        yield item
