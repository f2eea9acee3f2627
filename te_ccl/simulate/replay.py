"""Replay a :class:`~te_ccl.schedule.Schedule` in continuous time (no epochs, no solver code).

From the schedule only the routes, the order of transfers on each link and the
dependencies are kept; the times are recomputed by :mod:`te_ccl.simulate.engine`:

* a node sends chunk ``c`` once it holds it: it is a source of ``c`` (copy chunks), or a
  copy of ``c`` has arrived, or — for reduced chunks — every partial of ``c`` that the
  schedule delivers to it *before* the send (``arrive_epoch ≤ start_epoch``) has arrived
  (its own partial, if it is a source, is there from the start); a copy of a reduced
  chunk replaces the partial held, so there it is the last such copy and the partials
  after it;
* a switch without buffer forwards what arrives in the epoch the schedule sends it on
  (``arrive_epoch = start_epoch``), so two passes of one chunk stay two transfers, and
  it forwards cut-through (the engine's ``through``: as the chunk comes in, as in the
  XML replay); a switch with buffer stores and forwards;
* each link serves its transfers in the schedule's order (``start_epoch``, then position);
* a GPU is done when it holds every chunk it is a destination of (a copy arrived, or
  every partial the schedule sends it arrived).

Relation to the solver's predicted finish ``F·τ`` (``F`` = the schedule's finish epoch).
The replay starts each transfer as early as its dependencies and its link allow, and a
hop takes ``chunk/b + α`` instead of the ``ceil((chunk/b + α)/τ)`` epochs the model
reserves, so for a valid schedule whose links carry at most one chunk per epoch (or with
α = 0) ``simulated ≤ F·τ``. Conversely, rounding the replay's start times up to epochs
gives an epoch schedule whose every transfer is late by less than one epoch per transfer
on its longest dependency chain (data dependencies and link order), so for a schedule
that is optimal in the epoch model ``simulated > F·τ − L·τ``, ``L`` being the number of
transfers on that chain (:func:`chain_length`). When a link starts ``n > 1`` chunks in one
epoch and α > 0, the model's per-chunk arrival rule ignores that the n-th chunk leaves
the link ``(n-1)·chunk/b`` after the first; the replay does not, so it may exceed ``F·τ``
by up to that much.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.collective.model import Chunk
from te_ccl.deadline import checked
from te_ccl.errors import VerificationError
from te_ccl.nogc import paused_gc
from te_ccl.schedule import Schedule, Transfer
from te_ccl.simulate.engine import REPLAYING, Task, TaskTimes, cuts_through, run
from te_ccl.simulate.result import SimResult, finish_of, summarise

__all__ = ["simulate_schedule", "replay_finish", "schedule_tasks", "chain_length", "replay_times"]

_Incoming = dict[tuple[str, int], list[int]]


def _holding(chunk: Chunk, rank: int | None, incoming: list[int], copy: list[bool],
             transfers: tuple[Transfer, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(after_all, after_any)`` for a node to hold ``chunk`` given ``incoming`` (``copy[j]``:
    transfer ``j`` is a copy, else a reduction); None: never.

    Every copy of a copied chunk is its source's data, so any one will do. A copy of a
    reduced chunk replaces the partial held (it may be a partial itself), so the node
    holds what the last copy brought — last in the checker's order: arrival epoch, then
    sender — and the partials added after it."""
    copies = tuple(j for j in incoming if copy[j])
    if copies and not chunk.reduce:
        return (), copies
    if copies:
        def order(j: int) -> tuple[int, str, int]:
            return transfers[j].arrive_epoch, transfers[j].src, j

        last = max(copies, key=order)
        return (last,) + tuple(j for j in incoming if order(j) > order(last)), ()
    partials = tuple(incoming)
    if rank is not None and rank in chunk.sources:
        return (partials if chunk.reduce else ()), ()
    if chunk.reduce and partials:
        return partials, ()
    return None


def _incoming(transfers: tuple[Transfer, ...]) -> _Incoming:
    """The transfers arriving at each (node, chunk), in schedule order."""
    incoming: _Incoming = defaultdict(list)
    for j, t in enumerate(transfers):
        incoming[(t.dst, t.chunk)].append(j)
    return incoming


def schedule_tasks(schedule: Schedule) -> tuple[list[Task], dict[tuple[str, str], list[int]]]:
    """The engine's tasks (index-aligned with ``schedule.transfers``) and per-link order."""
    trs = schedule.transfers
    return _tasks(schedule, _incoming(trs), [t.op == "copy" for t in trs])


def _tasks(schedule: Schedule, incoming: _Incoming, copy: list[bool]
           ) -> tuple[list[Task], dict[tuple[str, str], list[int]]]:
    """:func:`schedule_tasks` given the schedule's :func:`_incoming` and copy flags."""
    topo, trs = schedule.topology, schedule.transfers
    chunks = {c.id: c for c in schedule.collective.chunks()}
    arrive = [t.arrive_epoch for t in trs]
    tasks = []
    nbytes = schedule.chunk_bytes
    ranks = {g: topo.rank(g) for g in topo.gpus}  # per node, not per transfer
    bufferless = {n.name for n in topo.nodes if cuts_through(n)}
    for i, t in enumerate(checked(trs, REPLAYING)):
        chunk = chunks.get(t.chunk)
        if chunk is None:
            raise VerificationError(f"{t}: chunk {t.chunk} is not part of the collective")
        through, start = t.src in bufferless, t.start_epoch
        came = incoming.get((t.src, t.chunk), ())
        earlier = [j for j in came if j != i and (
            arrive[j] == start if through else arrive[j] <= start)]
        deps = _holding(chunk, ranks.get(t.src), earlier, copy, trs)
        if deps is None:
            raise VerificationError(f"{t}: {t.src} sends chunk {t.chunk} before it holds it")
        tasks.append(Task((t.src, t.dst), nbytes, deps[0], deps[1], f"c{t.chunk}",
                          through=through))
    order: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in sorted(range(len(trs)), key=lambda i: (trs[i].start_epoch, i)):
        order[(trs[i].src, trs[i].dst)].append(i)
    return tasks, dict(order)


def _gpu_finish(schedule: Schedule, times: list[TaskTimes], incoming: _Incoming,
                copy: list[bool]) -> dict[str, float]:
    topo, trs = schedule.topology, schedule.transfers
    gpus = {r: topo.gpu(r) for r in schedule.collective.ranks}
    done = dict.fromkeys(gpus.values(), 0.0)
    for chunk in schedule.collective.chunks():
        for rank in chunk.destinations:
            gpu = gpus[rank]
            came = incoming.get((gpu, chunk.id), [])
            if not chunk.reduce and came and all(copy[j] for j in came):
                # a copied chunk is held once its first copy arrives
                done[gpu] = max(done[gpu], min(times[j].arrive_s for j in came))
                continue
            deps = _holding(chunk, rank, came, copy, trs)
            if deps is None or (chunk.reduce and not deps[1] and not deps[0]
                                and set(chunk.sources) != {rank}):
                raise VerificationError(f"rank {rank} ({gpu}) never receives chunk {chunk.id}")
            t_all = max((times[j].arrive_s for j in deps[0]), default=0.0)
            t_any = min((times[j].arrive_s for j in deps[1]), default=0.0)
            done[gpu] = max(done[gpu], t_all, t_any)
    return done


_last: list = [None, None, None, None]  # replayed last: transfers, topology, collective, times


def replay_times(schedule: Schedule) -> tuple[list[Task], list[TaskTimes]]:
    """The engine's tasks and their times for ``schedule`` (the last schedule's are kept:
    the pipeline judges a schedule by its replay, then the lowering times its edges by the
    same replay).

    Raises VerificationError as :func:`simulate_schedule`."""
    return _replayed(schedule)[:2]


def _replayed(schedule: Schedule) -> tuple[list[Task], list[TaskTimes], _Incoming, list[bool]]:
    """:func:`replay_times` with the :func:`_incoming` and copy flags it was built from,
    which :func:`_gpu_finish` reads too."""
    if _last[0] is schedule.transfers and _last[1] is schedule.topology \
            and _last[2] == schedule.collective:
        return _last[3]
    trs = schedule.transfers
    incoming, copy = _incoming(trs), [t.op == "copy" for t in trs]
    tasks, order = _tasks(schedule, incoming, copy)
    times = run(schedule.topology, tasks, order)
    _last[:] = [trs, schedule.topology, schedule.collective, (tasks, times, incoming, copy)]
    return tasks, times, incoming, copy


def simulate_schedule(schedule: Schedule) -> SimResult:
    """Replay ``schedule`` with α-β costs and link contention; see the module docstring.

    Raises
    ------
    VerificationError
        A transfer sends a chunk its node never holds, uses a missing link, a destination
        never receives its chunk, or the link order deadlocks.
    """
    with paused_gc():
        tasks, times, incoming, copy = _replayed(schedule)
        return summarise(tasks, times, _gpu_finish(schedule, times, incoming, copy))


def replay_finish(schedule: Schedule) -> float:
    """``simulate_schedule(schedule).finish_time_s`` without the per-link summary and
    intervals (all that judging a schedule needs)."""
    with paused_gc():
        tasks, times, incoming, copy = _replayed(schedule)
        return finish_of(tasks, times, _gpu_finish(schedule, times, incoming, copy))[0]


def chain_length(schedule: Schedule) -> int:
    """Transfers on the longest chain of data dependencies and link order (``L`` above)."""
    tasks, order = schedule_tasks(schedule)
    preds: dict[int, set[int]] = defaultdict(set)
    for i, t in enumerate(tasks):
        preds[i].update(t.after_all, t.after_any)
    for seq in order.values():
        for a, b in zip(seq, seq[1:], strict=False):
            preds[b].add(a)
    trs = schedule.transfers
    depth: dict[int, int] = {}
    for i in sorted(range(len(trs)), key=lambda i: (trs[i].start_epoch, i)):
        depth[i] = 1 + max((depth[p] for p in preds[i] if p in depth), default=0)
    return max(depth.values(), default=0)
