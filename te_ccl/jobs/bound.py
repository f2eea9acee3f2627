"""A lower bound on the joint objective: what no set of files can beat when the jobs run
together, so the gain a joint compile can still make is known before it searches.

The theorem, for files replayed together (:mod:`te_ccl.simulate.cosim`), every job
starting at 0. Take a *resource*: a set of links of total bandwidth ``c``. A link
delivers at most ``b·T`` bytes by time ``T`` (fact (a) of :mod:`te_ccl.bounds`), so the
resource delivers at most ``c·T``. Give each job ``j`` a *demand* ``d_j``: bytes its
collective must move across the resource in every schedule of it. Order the jobs by
finish time; the ``k``-th to finish has, by then, seen the demands of all ``k`` delivered,
so ``C_(k) ≥ Σ_{i≤k} d_i / c`` for every resource at once, and ``C_j ≥ L_j``, job ``j``'s
own bound (:func:`te_ccl.bounds.lower_bound`). The weighted sum of finish times is
therefore at least the least, over orders of the jobs, of
``Σ_j w_j · max(L_j, max_r Σ_{i up to j} d_{i,r} / c_r)``, and the makespan at least
``max(max_j L_j, max_r Σ_j d_{j,r} / c_r)``.

Resources and demands (``R`` a job's GPUs, ``N = |R|``, ``M`` its size in bytes):

* the links into a node set ``S`` (a group of :func:`te_ccl.bounds.threshold_groups`: a
  box, a rack; a job's GPUs; the GPUs two jobs share): the bytes that must enter ``S``,
  the cut argument of :mod:`te_ccl.bounds` — AllGather ``(M/N)·|R∖S|`` where a member is
  inside, AllReduce ``M`` where members are on both sides, and the others alike; the
  links out of ``S`` the same, reversed;
* the links into each GPU of a set ``G``: each member must receive what it lacks —
  AllGather ``(N−1)M/N`` each; AllReduce ``M`` each, or ``2(N−1)M`` in all where ``G``
  holds every member and no switch adds (the gossip count: a job's values are added
  only on its own GPUs, since other GPUs only forward its sends); Broadcast ``M`` each
  but the root, Reduce ``M`` at the root, and Gather and Scatter alike by ``M/N``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from te_ccl.bounds import lower_bound, threshold_groups
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.jobs.spec import JobSet
from te_ccl.topology.model import Topology

__all__ = ["JointBound", "joint_bound"]

EXACT_ORDER_JOBS = 7  # up to this many jobs every order is tried (7! = 5040)


@dataclass(frozen=True)
class JointBound:
    """``seconds``: the bound on the objective; ``resource``: the links that set the
    last job's finish in the order attaining it (or ``own bounds``)."""

    seconds: float
    resource: str


@dataclass(frozen=True)
class _Resource:
    name: str
    capacity_Bps: float
    demand: tuple[float, ...]  # bytes per job, in the jobs' order


def _cut_demand(c: Collective, members: Sequence[str], root: str | None, inside: set[str],
                *, into: bool) -> float:
    """Bytes of ``c`` that must cross into (or out of) ``inside``."""
    K = CollectiveKind
    n, m = len(members), float(c.size_bytes)
    ins = sum(1 for g in members if g in inside)
    outs = n - ins
    if ins == 0 or outs == 0:
        return 0.0
    if root is not None:  # the root's side sends (Broadcast, Scatter) or receives
        near = (root in inside) == into  # the root is on the receiving side
        if c.kind in (K.BROADCAST, K.REDUCE):
            return m if near == (c.kind is K.REDUCE) else 0.0
        if c.kind is K.GATHER:
            return m / n * (outs if into else ins) if near else 0.0
        return 0.0 if near else m / n * (ins if into else outs)  # Scatter
    if c.kind is K.ALLREDUCE:
        return m
    if c.kind is K.ALLGATHER:
        return m / n * (outs if into else ins)
    if c.kind is K.REDUCESCATTER:
        return m / n * (ins if into else outs)
    return m / n * ins * outs if c.kind is K.ALLTOALL else 0.0


def _gpu_in_demand(c: Collective, members: Sequence[str], root: str | None, gpus: set[str],
                   adds: bool) -> float:
    """Bytes of ``c`` that must arrive at the GPUs ``gpus``, over their own links."""
    K = CollectiveKind
    n, m = len(members), float(c.size_bytes)
    mine = sum(1 for g in members if g in gpus)
    if n < 2 or mine == 0:
        return 0.0
    if root is not None:
        if c.kind in (K.REDUCE, K.GATHER):  # only the root receives what it keeps
            return (m if c.kind is K.REDUCE else m * (n - 1) / n) if root in gpus else 0.0
        others = mine - (root in gpus)
        return others * (m if c.kind is K.BROADCAST else m / n)
    if c.kind is K.ALLREDUCE:
        return 2 * (n - 1) * m if mine == n and not adds else mine * m
    if c.kind in (K.ALLGATHER, K.ALLTOALL):
        return mine * m * (n - 1) / n
    return mine * m / n if c.kind is K.REDUCESCATTER else 0.0


def _node_sets(topology: Topology, members: list[list[str]]) -> list[frozenset[str]]:
    """The node sets whose links bind jobs together: boxes and racks, each job's GPUs,
    the GPUs two jobs share, and each of those GPUs alone."""
    sets = {frozenset(g) for g in threshold_groups(topology)}
    ranks = [set(m) for m in members]
    sets.update(frozenset(r) for r in ranks)
    shared = [frozenset(a & b) for a, b in itertools.combinations(ranks, 2) if a & b]
    sets.update(shared)
    sets.update(frozenset([g]) for s in shared for g in s)
    sets.discard(frozenset(topology.gpus))
    sets.discard(frozenset(n.name for n in topology.nodes))
    return sorted((s for s in sets if s), key=sorted)


def _resources(topology: Topology, jobs: JobSet) -> Iterable[_Resource]:
    members = [[topology.gpu(r) for r in j.ranks] for j in jobs.jobs]
    roots = [None if j.collective.root is None else topology.gpu(j.collective.root)
             for j in jobs.jobs]
    adds = any(topology.node(s).can_reduce for s in topology.switches)
    for s in _node_sets(topology, members):
        for into in (True, False):
            links = [k for k in topology.links if (k.dst in s) == into and (k.src in s) != into]
            demand = tuple(_cut_demand(j.collective, m, r, set(s), into=into)
                           for j, m, r in zip(jobs.jobs, members, roots, strict=True))
            if links and sum(d > 0 for d in demand) > 1:
                yield _Resource(f"{'into' if into else 'out of'} {_label(s)}",
                                sum(k.bandwidth_Bps for k in links), demand)
        gpus = {g for g in s if topology.node(g).is_gpu}
        demand = tuple(_gpu_in_demand(j.collective, m, r, gpus, adds)
                       for j, m, r in zip(jobs.jobs, members, roots, strict=True))
        links = [k for k in topology.links if k.dst in gpus]
        if links and sum(d > 0 for d in demand) > 1:
            yield _Resource(f"into each GPU of {_label(gpus)}",
                            sum(k.bandwidth_Bps for k in links), demand)


def _label(nodes: Iterable[str]) -> str:
    names = sorted(nodes)
    return f"{{{', '.join(names)}}}" if len(names) <= 3 else f"{len(names)} nodes from {names[0]}"


def joint_bound(jobs: JobSet, objective: str) -> JointBound:
    """The bound of the module docstring on ``objective`` (``max`` or ``weighted``)."""
    own = [lower_bound(jobs.topology, j.collective).seconds for j in jobs.jobs]
    weights = [j.weight for j in jobs.jobs]
    res = list(_resources(jobs.topology, jobs))

    def finishes(order: Sequence[int]) -> tuple[list[float], str]:
        """Each job's least finish when the jobs finish in ``order``."""
        done, why = list(own), ["own bounds"] * len(own)
        for r in res:
            total = 0.0
            for j in order:
                total += r.demand[j]
                if total / r.capacity_Bps > done[j]:
                    done[j], why[j] = total / r.capacity_Bps, r.name
        return done, why[order[-1]]

    if objective == "max":
        done, why = finishes(range(len(own)))  # the last in any order sees every demand
        last = max(range(len(own)), key=lambda j: (done[j], j == len(own) - 1))
        return JointBound(done[last], why if last == len(own) - 1 else "own bounds")
    if len(own) > EXACT_ORDER_JOBS:
        # too many orders: each job's own bound, and the job finishing last (weight at
        # least the least) past the latest own bound by what every demand takes
        done, why = finishes(range(len(own)))
        extra = max(0.0, done[-1] - max(own))
        return JointBound(sum(w * t for w, t in zip(weights, own, strict=True))
                          + min(weights) * extra, why)
    best = min((finishes(order) for order in itertools.permutations(range(len(own)))),
               key=lambda f: sum(w * t for w, t in zip(weights, f[0], strict=True)))
    return JointBound(sum(w * t for w, t in zip(weights, best[0], strict=True)), best[1])
