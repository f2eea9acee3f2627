"""A quick schedule from fixed trees, chunks pipelined: the MILP's first incumbent.

Each chunk leaves its one source (or, for a forward-time reduction, its root once the
partials have met there) along a shortest-path out-tree to its destinations; a reduced
chunk's partials first follow a shortest-path in-tree into the root. The hops are timed
backwards from the root's epoch so that partials meet in the epoch a switch without
buffer forwards them, and forwards from it on the way out; chunk after chunk takes the
first root epoch at which every hop fits the link capacities. The result is feasible
for the model of :mod:`te_ccl.model.constraints` by construction; large models (an
AllReduce on FRED: ~80k variables) find no first solution alone, and where it meets the
epoch lower bound the search is over at once.

There is none where the trees would add partials at a node that cannot (not a GPU nor
a reducing switch), fan out at one that cannot copy, relay through a GPU with a buffer
limit, or where a chunk has several sources or earlier rounds left state.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.deadline import checked
from te_ccl.model.problem import Problem
from te_ccl.model.ten import distances

__all__ = ["pipelined_trees"]

Key = tuple[str, str]


def _parents(problem: Problem, root: str, reverse: bool) -> dict[str, str]:
    """Next hop toward ``root`` (``reverse``) or the hop from which a node is reached."""
    dist = distances(problem, {root: 0}, reverse=reverse)
    out: dict[str, str] = {}
    for (u, v), lt in sorted(problem.timings.items()):
        a, b = (u, v) if reverse else (v, u)  # a: the node choosing, b: its neighbour
        if a == root or b not in dist or a not in dist:
            continue
        if dist[b] + lt.delay == dist[a] and (a not in out or b < out[a]):
            out[a] = b
    return out


class _Links:
    """Starts per link and epoch: at most ``capacity`` in any ``occupancy`` consecutive."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.starts: dict[Key, dict[int, int]] = defaultdict(lambda: defaultdict(int))

    def fits(self, hops: list[tuple[Key, int]]) -> bool:
        need: dict[tuple[Key, int], int] = defaultdict(int)
        for link, t in hops:
            need[(link, t)] += 1
        for link, t in need:
            lt, s = self.problem.timings[link], self.starts[link]
            k = lt.occupancy
            for w in range(t - k + 1, t + 1):
                mine = sum(need.get((link, e), 0) for e in range(w, w + k))
                if sum(s.get(e, 0) for e in range(w, w + k)) + mine > lt.capacity:
                    return False
        return True

    def take(self, hops: list[tuple[Key, int]]) -> None:
        for link, t in hops:
            self.starts[link][t] += 1


def pipelined_trees(problem: Problem) -> list[tuple] | None:
    """Transfer keys (``x`` and ``y``, see :mod:`te_ccl.model.ten`) of the schedule, or
    None (module docstring)."""
    st = problem.state
    if st.incoming or st.busy or st.relayed:
        return None
    merges, copies = problem.merge_nodes, problem.copy_nodes
    links, keys = _Links(problem), []
    trees: dict[str, tuple[dict[str, str], dict[str, str], dict[str, int], dict[str, int]]] = {}
    for d in checked(problem.demands):
        r = problem.reductions.get(d.chunk)
        if len(d.sources) != 1 or (r is None and not problem.holds(d.chunk, d.sources[0])):
            return None
        root = d.sources[0]
        if root not in trees:
            trees[root] = (_parents(problem, root, True), _parents(problem, root, False),
                           distances(problem, {root: 0}, reverse=True),
                           distances(problem, {root: 0}))
        up, down, to_root, from_root = trees[root]
        climb = _tree(r.sources if r else (), root, up, merges, False)
        fan = _tree(d.destinations, root, down, copies, True)
        if climb is None or fan is None:
            return None
        ends = set(d.sources) | set(d.destinations) | set(r.sources if r else ())
        if any(n in problem.relay_limit and n not in ends for link in climb | fan for n in link):
            return None
        # hop → epoch offset from the epoch T at which the root holds the chunk
        rel = [(("y", link), -to_root[link[0]]) for link in sorted(climb)]
        rel += [(("x", link), from_root[link[0]]) for link in sorted(fan)]
        t = max((to_root[s] for s in r.sources if s != root), default=0) if r else 0
        while not links.fits([(link, t + o) for (_, link), o in rel]):
            t += 1
        links.take([(link, t + o) for (_, link), o in rel])
        for (kind, link), o in rel:
            keys.append(("y", d.chunk, link, t + o) if kind == "y" else (d.chunk, link, t + o))
    return keys


def _tree(ends, root: str, parent: dict[str, str], joins: frozenset[str], outward: bool
          ) -> set[tuple[str, str]] | None:
    """The hops joining ``ends`` to ``root`` along ``parent`` (links from the root when
    ``outward``, else toward it); None if two branches join at a node outside ``joins``
    or an end cannot reach the root."""
    hops: set[tuple[str, str]] = set()
    degree: dict[str, int] = defaultdict(int)
    for n in ends:
        while n != root:
            if n not in parent:
                return None
            link = (parent[n], n) if outward else (n, parent[n])
            if link in hops:
                break
            hops.add(link)
            degree[parent[n]] += 1
            n = parent[n]
    if any(k > 1 and n not in joins for n, k in degree.items()):
        return None
    return hops
