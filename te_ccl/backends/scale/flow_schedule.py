"""List scheduling of sub-chunks along fixed routes, epoch by epoch (for :mod:`.flow_alltoall`).

Each link starts up to ``capacity`` waiting sub-chunks per epoch (``occupancy`` epochs
apart on slow links), longest remaining route first, ties in a random order (``seed``:
in chunk order a link would see one destination after another and stall whenever that
destination's switch port is busy). A switch without buffer forwards in the epoch a chunk
arrives, so a route is cut into segments between buffered nodes and a segment starts
only if every link of it has a start free at its arrival epoch. When a link would idle
because another link's segment took the switch port its candidate needs, the two swap
if the other link has a different candidate that fits (one augmenting step of the
per-epoch matching through the switch).
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict

import numpy as np

from te_ccl.backends.scale.moves import Moves
from te_ccl.deadline import Budget
from te_ccl.errors import SolverError
from te_ccl.model.problem import Problem

__all__ = ["list_schedule"]

Key = tuple[str, str]
Path = tuple[str, ...]
MAX_SKIPS = 32  # blocked sub-chunks a link passes over before it waits an epoch


class _Slots:
    """Link starts per epoch: ``capacity`` per epoch, or one per ``occupancy`` epochs.

    A slow link next to a switch without buffer starts only on its grid (epochs
    ``phase + i·occupancy``): starts that arrive through the switch at random offsets
    would leave gaps shorter than one occupancy on its out-links.
    """

    def __init__(self, problem: Problem, keys: list[Key]) -> None:
        timings = [problem.timings[k] for k in keys]
        self.cap = [t.capacity for t in timings]
        self.occ = [t.occupancy for t in timings]
        self.delay = [t.delay for t in timings]
        self.used: list[dict[int, int]] = [defaultdict(int) for _ in timings]
        self.phase: list[int | None] = [None] * len(keys)
        index = {k: i for i, k in enumerate(keys)}
        for sw in problem.topology.nodes:
            if sw.name not in problem.buffered_nodes:
                self._align(problem, sw.name, index)

    def _align(self, problem: Problem, sw: str, index: dict[Key, int]) -> None:
        """Grid the slow links of bufferless switch ``sw`` if one grid serves them all.

        That needs one occupancy ``k`` for all of them, one ``delay mod k`` for the slow
        in-links, and buffered far ends (a grid an in-link cannot reach would deadlock).
        """
        ins = [k for k in problem.topology.in_links(sw) if k.key in index]
        outs = [k for k in problem.topology.out_links(sw) if k.key in index]
        if any(x not in problem.buffered_nodes for x in [k.src for k in ins] +
               [k.dst for k in outs]):
            return
        slow_in = [index[x.key] for x in ins if self.occ[index[x.key]] > 1]
        slow_out = [index[x.key] for x in outs if self.occ[index[x.key]] > 1]
        ks = {self.occ[i] for i in slow_in + slow_out}
        if len(ks) != 1:
            return
        k = ks.pop()
        shifts = {self.delay[i] % k for i in slow_in}
        if len(shifts) > 1:
            return
        shift = shifts.pop() if shifts else 0
        for i in slow_in:
            self.phase[i] = 0
        for i in slow_out:
            self.phase[i] = shift

    def free(self, link: int, e: int) -> bool:
        used, k = self.used[link], self.occ[link]
        if k == 1:
            return used.get(e, 0) < self.cap[link]
        phase = self.phase[link]
        if phase is not None and (e - phase) % k:
            return False
        if len(used) < 2 * k:  # a slow link: fewer starts than epochs to look at
            return not any(abs(x - e) < k and n for x, n in used.items())
        return not any(used.get(x) for x in range(e - k + 1, e + k))

    def take(self, link: int, e: int, n: int = 1) -> None:
        self.used[link][e] += n


def _segments(problem: Problem, path: Path, index: dict[Key, int]
              ) -> list[tuple[tuple[int, int], ...]]:
    """The route cut at buffered nodes: per segment, (link, start offset) of each link."""
    out, seg, offset = [], [], 0
    for u, v in zip(path, path[1:], strict=False):
        seg.append((index[(u, v)], offset))
        offset += problem.timings[(u, v)].delay
        if v in problem.buffered_nodes:
            out.append(tuple(seg))
            seg, offset = [], 0
    return out


class _Run:
    """The state of one list schedule; ``rows`` are (item, link, start, arrive)."""

    def __init__(self, problem: Problem, assignment: list[tuple[int, Path]], seed: int) -> None:
        self.keys = list(problem.timings)
        index = {k: i for i, k in enumerate(self.keys)}
        self.delay = [problem.timings[k].delay for k in self.keys]
        self.slots = _Slots(problem, self.keys)
        routes = {p: _segments(problem, p, index) for p in {p for _, p in assignment}}
        self.route = [routes[p] for _, p in assignment]
        left = {p: [sum(self.delay[i] for seg in segs[j:] for i, _ in seg)
                    for j in range(len(segs))] for p, segs in routes.items()}
        self.left = [left[p] for _, p in assignment]
        self.tie = np.random.default_rng(seed).permutation(len(assignment)).tolist()
        self.step = [0] * len(assignment)
        self.queues: dict[int, list] = defaultdict(list)
        self.ready: dict[int, list[int]] = defaultdict(list)
        self.ready[0] = list(range(len(assignment)))
        self.rows: list[tuple[int, int, int, int]] = []
        self.dropped: set[int] = set()
        self.holder: dict[tuple[int, int], tuple[int, int]] = {}  # (link, t) → (item, first link)
        self.pending = len(assignment)

    def entry(self, item: int) -> tuple[int, int, int]:
        return (-self.left[item][self.step[item]], self.tie[item], item)

    def fits(self, item: int, e: int) -> bool:
        seg = self.route[item][self.step[item]]
        return all(self.slots.free(i, e + off) for i, off in seg[1:])

    def start(self, item: int, e: int) -> None:
        seg = self.route[item][self.step[item]]
        for i, off in seg:
            self.slots.take(i, e + off)
            self.holder[(i, e + off)] = (item, seg[0][0])
            self.rows.append((item, i, e + off, e + off + self.delay[i]))
        self.step[item] += 1
        if self.step[item] < len(self.route[item]):
            self.ready[self.rows[-1][3]].append(item)
        else:
            self.pending -= 1

    def undo(self, item: int, e: int) -> None:
        """Take back ``item``'s segment started at ``e`` (the last rows it added)."""
        self.step[item] -= 1
        seg = self.route[item][self.step[item]]
        arrive = e + seg[-1][1] + self.delay[seg[-1][0]]
        if self.step[item] + 1 < len(self.route[item]):
            self.ready[arrive].remove(item)
        else:
            self.pending += 1
        for i, off in seg:
            self.slots.take(i, e + off, -1)
            if self.holder.get((i, e + off), (None,))[0] == item:
                del self.holder[(i, e + off)]
        mine = (r for r in range(len(self.rows) - 1, -1, -1)
                if r not in self.dropped and self.rows[r][0] == item)
        self.dropped.update(itertools.islice(mine, len(seg)))

    def serve(self, link: int, e: int) -> list[tuple[int, int, int]]:
        """Start what fits on ``link`` at ``e``; returns the blocked entries (popped)."""
        heap, skipped = self.queues[link], []
        while heap and self.slots.free(link, e) and len(skipped) < MAX_SKIPS:
            entry = heapq.heappop(heap)
            if self.fits(entry[2], e):
                self.start(entry[2], e)
            else:
                skipped.append(entry)
        return skipped

    def swap(self, link: int, e: int, skipped: list[tuple[int, int, int]]) -> None:
        """``link`` idles at ``e``: free a port another link took if that link has an
        alternative. A link found without one is not asked again for this idle link (its
        queue is the same each time, so asking cost up to MAX_SKIPS² fits per swap)."""
        hopeless: set[int] = set()
        for n, entry in enumerate(skipped):
            item = entry[2]
            seg = self.route[item][self.step[item]]
            blocked = [(i, e + off) for i, off in seg[1:] if not self.slots.free(i, e + off)]
            if len(blocked) != 1 or blocked[0] not in self.holder:
                continue
            other, other_link = self.holder[blocked[0]]
            if other_link in hopeless:
                continue
            self.undo(other, e)
            if self.fits(item, e):
                self.start(item, e)
                before = len(self.rows)
                rest = self.serve(other_link, e)
                if len(self.rows) > before:  # the other link found an alternative
                    heapq.heappush(self.queues[other_link], self.entry(other))
                    for x in rest:
                        heapq.heappush(self.queues[other_link], x)
                    del skipped[n]
                    return
                self.undo(item, e)
                for x in rest:
                    heapq.heappush(self.queues[other_link], x)
                hopeless.add(other_link)
            self.start(other, e)

    def epoch(self, e: int) -> None:
        for item in self.ready.pop(e, ()):
            heapq.heappush(self.queues[self.route[item][self.step[item]][0][0]], self.entry(item))
        self.holder.clear()
        blocked = {}
        # the longest queues pick first: a link that keeps losing the ports it needs
        # would otherwise be left with the last, unshared work
        for link in sorted((x for x, q in self.queues.items() if q),
                           key=lambda x: -len(self.queues[x])):
            blocked[link] = self.serve(link, e)
        for link, skipped in blocked.items():
            if skipped and self.slots.free(link, e):
                self.swap(link, e, skipped)
            for entry in skipped:
                heapq.heappush(self.queues[link], entry)


def list_schedule(problem: Problem, assignment: list[tuple[int, Path]], budget: Budget,
                  seed: int) -> Moves:
    """Moves for sub-chunk ``assignment[i] = (chunk, route)``, every route in full."""
    run, e, last = _Run(problem, assignment, seed), 0, 0
    stall = 2 * max(t.occupancy + t.delay for t in problem.timings.values()) * len(
        problem.topology.nodes) + 10
    while run.pending:
        before = len(run.rows)
        run.epoch(e)
        last = e if len(run.rows) > before else last
        if budget.spent or e - last > stall:
            raise SolverError("the AlltoAll list schedule " + (
                "ran out of time" if budget.spent else f"stalled at epoch {e}"))
        e = e + 1 if any(run.queues.values()) or not run.ready else min(run.ready)
    rows = [r for n, r in enumerate(run.rows) if n not in run.dropped]
    names = tuple(n.name for n in problem.topology.nodes)
    node = {n: i for i, n in enumerate(names)}
    r = np.array(rows, dtype=np.int64).reshape(-1, 4).T
    chunk = np.array([c for c, _ in assignment], dtype=np.int64)
    src = np.array([node[u] for u, _ in run.keys], dtype=np.int64)
    dst = np.array([node[v] for _, v in run.keys], dtype=np.int64)
    return Moves(names, chunk[r[0]], src[r[1]], dst[r[1]], r[2], r[3])
