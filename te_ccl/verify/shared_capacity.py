"""Independent check that several jobs' schedules fit one topology's links together.

Each schedule is checked on its own by :func:`~te_ccl.verify.schedule_check.check_schedule`;
this checks what none of them sees: the sum over jobs. Jobs may use different epoch
durations, so the check is on real time. A transfer of ``c`` bytes on a link of
latency ``α`` is released at ``start_epoch·τ`` and is held at the far end from
``arrive_epoch·τ``, so its bytes cross the link inside ``[start·τ, arrive·τ − α]``
(its window). The rule (a demand bound): on every link, for every time interval, the
bytes of all jobs' transfers whose windows lie inside it fit the link's bandwidth times
its length. A job alone meets it whenever its schedule keeps to the link (the epoch
model's capacity rule implies it); jobs that each keep to a share of the link, the
shares summing to at most one, meet it together.

It uses only the topology's links and the transfers (nothing of the solver or of how
the schedules were made).

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.schedule import Schedule, Transfer
>>> from te_ccl.topology import Link, Node, Topology
>>> topo = Topology.build("pair", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
>>> coll = Collective(CollectiveKind.ALLGATHER, 2000, (0, 1))
>>> one = Schedule(topo, coll, 1e-6, (Transfer(0, "a", "b", 0, 1), Transfer(1, "b", "a", 0, 1)))
>>> check_shared_capacity({"x": one})
[]
>>> [v.rule for v in check_shared_capacity({"x": one, "y": one})]
['shared-capacity', 'shared-capacity']
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from te_ccl.schedule import Schedule
from te_ccl.verify.schedule_check import Violation

__all__ = ["check_shared_capacity"]

_EPS = 1e-9


def check_shared_capacity(schedules: Mapping[str, Schedule]) -> list[Violation]:
    """One violation per link over its bandwidth in some interval (the worst one, and
    the jobs with transfers in it), for job name → schedule, all on one topology."""
    names = list(schedules)
    if not names:
        return []
    topology = schedules[names[0]].topology
    per_link: dict[tuple[str, str], list[tuple[float, float, float, int]]] = {}
    for j, schedule in enumerate(schedules.values()):
        tau, chunk = schedule.epoch_s, schedule.collective.chunk_bytes
        for t in schedule.transfers:
            per_link.setdefault((t.src, t.dst), []).append(
                (t.start_epoch * tau, t.arrive_epoch * tau, chunk, j))
    out = []
    for key, rows in sorted(per_link.items()):
        if not topology.has_link(*key):
            out.append(Violation("link", f"{key[0]}→{key[1]} is not a link of "
                                         f"{topology.name}"))
            continue
        link = topology.link(*key)
        if len({r[3] for r in rows}) < 2:
            continue  # one job's use of a link is its own checker's business
        worst = _worst(np.array(rows, dtype=float), link.bandwidth_Bps, link.latency_s)
        if worst is not None:
            t1, t2, need, jobs = worst
            out.append(Violation(
                "shared-capacity",
                f"{key[0]}→{key[1]}: {need:.6g} bytes of jobs {', '.join(names[j] for j in jobs)}"
                f" must cross it within {t1 * 1e6:.6g}..{t2 * 1e6:.6g} us, more than its "
                f"{link.bandwidth_Bps / 1e9:.4g} GB/s carry"))
    return out


def _worst(rows: np.ndarray, bandwidth: float, latency: float
           ) -> tuple[float, float, float, list[int]] | None:
    """The interval of one link most over its bandwidth, or None: for each release time
    ``t1``, the transfers released from then on, by deadline, against ``b·(t2 − t1)``."""
    start, deadline = rows[:, 0], rows[:, 1] - latency
    order = np.argsort(deadline, kind="stable")
    start, deadline, size, job = start[order], deadline[order], rows[order, 2], rows[order, 3]
    best = None
    for t1 in np.unique(start):
        inside = start >= t1 - _EPS * max(t1, 1e-12)
        if not inside.any():
            continue
        ends = deadline[inside]
        need = np.cumsum(size[inside])
        excess = need - bandwidth * (ends - t1) * (1 + _EPS)
        i = int(np.argmax(excess))
        if excess[i] > _EPS * need[i] and (best is None or excess[i] > best[0]):
            jobs = sorted({int(x) for x in job[inside][: i + 1]})
            best = (excess[i], float(t1), float(ends[i]), float(need[i]), jobs)
    return None if best is None else best[1:]
