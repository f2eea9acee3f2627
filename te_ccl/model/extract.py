"""From chosen transfer variables to Schedule transfers, keeping only the useful ones.

A transfer is useful if it is the first delivery of its chunk to a destination, or if it
feeds a useful transfer: the sender's first arrival before the send (copying node with a
buffer), an arrival in the send's own epoch (switch without buffer), or — at a node that
cannot copy — its own arrival, matched one to one in time order. Pruning keeps every
remaining send fed, so the schedule stays valid; for reductions it leaves a tree. The
partial sums of a chunk reduced in forward time (a problem's ``reductions``) already form
a tree into its root, which then counts as holding the chunk.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from te_ccl.deadline import checked
from te_ccl.errors import TecclError
from te_ccl.model.problem import Problem
from te_ccl.schedule import Transfer

__all__ = ["to_transfers", "prune", "reverse_in_time", "split_by_job"]


def to_transfers(problem: Problem, chosen: Iterable[tuple], shift: int = 0) -> list[Transfer]:
    """``x[c, (u, v), t] = 1`` → ``Transfer(c, u, v, t, t + d)``, epochs moved by ``shift``;
    a partial sum ``y`` (key ``("y", c, (u, v), t)``) → the same with ``op="reduce"``."""
    out = []
    for key in chosen:
        op, (c, (u, v), t) = ("reduce", key[1:]) if key[0] == "y" else ("copy", key)
        d = problem.timings[(u, v)].delay
        out.append(Transfer(c, u, v, t + shift, t + d + shift, op))
    return sorted(out)


def _feeders(problem: Problem, node: str, ts: list[Transfer], incoming: list[int],
             outgoing: list[int]) -> dict[int, int]:
    """Which arrival each send at ``node`` forwards (positions in ``ts``: two identical
    transfers, such as two units of one chunk on a link in one epoch, are two)."""
    buffered = node in problem.buffered_nodes
    ok = (lambda a, s: a.arrive_epoch <= s.start_epoch) if buffered else (
        lambda a, s: a.arrive_epoch == s.start_epoch)
    copies = node in problem.copy_nodes
    used: set[int] = set()
    out = {}
    for s in sorted(outgoing, key=lambda i: (ts[i].start_epoch, ts[i], i)):
        feeder = next((a for a in incoming if ok(ts[a], ts[s]) and (copies or a not in used)),
                      None)
        if feeder is None:
            raise TecclError(f"internal: no arrival feeds {ts[s]} at {node}")
        used.add(feeder)
        out[s] = feeder
    return out


def prune(problem: Problem, transfers: Iterable[Transfer]) -> list[Transfer]:
    """The useful transfers of ``transfers`` (see the module docstring)."""
    by_chunk: dict[int, list[Transfer]] = defaultdict(list)
    for t in transfers:
        by_chunk[t.chunk].append(t)
    kept: list[Transfer] = []
    for d in checked(problem.demands, "keeping the useful transfers", every=256):
        ts = by_chunk.get(d.chunk, [])
        reduction = problem.reductions.get(d.chunk)
        if reduction is not None:  # the partial sums form a tree into the root: all useful
            kept.extend(t for t in ts if t.op == "reduce")
            ts = [t for t in ts if t.op != "reduce"]
        holders = {reduction.root} if reduction is not None else set()
        ts = sorted(ts, key=lambda t: (t.arrive_epoch, t))
        incoming, outgoing = defaultdict(list), defaultdict(list)
        for i, t in enumerate(ts):
            incoming[t.dst].append(i)
            outgoing[t.src].append(i)
        feeds: dict[int, int] = {}
        for node, outs in outgoing.items():
            if not problem.holds(d.chunk, node) and node not in holders:
                feeds.update(_feeders(problem, node, ts, incoming[node], outs))
        todo = [incoming[v][0] for v in d.destinations
                if not problem.holds(d.chunk, v) and incoming[v]]
        needed: set[int] = set()
        while todo:
            i = todo.pop()
            if i not in needed:
                needed.add(i)
                if i in feeds:
                    todo.append(feeds[i])
        kept.extend(ts[i] for i in needed)
    return sorted(kept)


def reverse_in_time(transfers: Iterable[Transfer], finish: int, shift: int = 0) -> list[Transfer]:
    """A schedule on the reversed graph played backwards: ``u→v [s, a)`` becomes ``v→u [F−a, F−s)``.

    Copies become reductions: where the forward schedule fanned a chunk out, the
    reversed one gathers partials, and a node sends only after all its inputs arrived.

    >>> reverse_in_time([Transfer(0, "a", "b", 0, 1), Transfer(0, "b", "c", 1, 3)], 3)
    [Transfer(chunk=0, src='b', dst='a', start_epoch=2, arrive_epoch=3, op='reduce'), \
Transfer(chunk=0, src='c', dst='b', start_epoch=0, arrive_epoch=2, op='reduce')]
    """
    return sorted(Transfer(t.chunk, t.dst, t.src, finish - t.arrive_epoch + shift,
                           finish - t.start_epoch + shift, "reduce") for t in transfers)


def split_by_job(problem: Problem, transfers: Iterable[Transfer], offsets: dict[str, int]
                 ) -> dict[str, list[Transfer]]:
    """A merged problem's transfers (:func:`~te_ccl.model.problem.merge_problems`) per job,
    each chunk numbered as in its job's own problem (``offsets``: job → its first chunk)."""
    out: dict[str, list[Transfer]] = {job: [] for job in offsets}
    for t in transfers:
        job = problem.owners[t.chunk]
        out[job].append(replace(t, chunk=t.chunk - offsets[job]))
    return {job: sorted(ts) for job, ts in out.items()}
