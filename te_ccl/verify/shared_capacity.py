"""Independent check that several jobs' schedules fit one topology's links together.

Each schedule is checked on its own by :func:`~te_ccl.verify.schedule_check.check_schedule`;
this checks what none of them sees: the sum over jobs. Jobs may use different epoch
durations, so the check is on real time. A transfer of ``c`` bytes on a link starts at
``start_epoch·τ`` and is held at the far end from ``arrive_epoch·τ``; its bytes cross the
link somewhere in between, so it needs at least the rate ``c / ((arrive − start)·τ)``
over that window (a window of one epoch at least). The rule: on every link, at every
instant, the rates of the transfers of all jobs whose windows cover it sum to at most
the link's bandwidth. Within one schedule the epoch model's own capacity rule implies
this; across jobs it is what sharing the link means.

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

from te_ccl.schedule import Schedule
from te_ccl.verify.schedule_check import Violation

__all__ = ["check_shared_capacity"]

_EPS = 1e-9


def check_shared_capacity(schedules: Mapping[str, Schedule]) -> list[Violation]:
    """One violation per link over its bandwidth somewhere (the worst instant, and the
    jobs sending then), for job name → schedule, all on one topology."""
    names = list(schedules)
    if not names:
        return []
    topology = schedules[names[0]].topology
    events: dict[tuple[str, str], list[tuple[float, int, float, str]]] = {}
    for name, schedule in schedules.items():
        tau, chunk = schedule.epoch_s, schedule.collective.chunk_bytes
        for t in schedule.transfers:
            start, end = t.start_epoch * tau, max(t.arrive_epoch, t.start_epoch + 1) * tau
            rate = chunk / (end - start)
            per = events.setdefault((t.src, t.dst), [])
            per.append((start, 1, rate, name))
            per.append((end, 0, -rate, name))  # ends sort before starts at one instant
    out = []
    for key, per in sorted(events.items()):
        if not topology.has_link(*key):
            out.append(Violation("link", f"{key[0]}→{key[1]} is not a link of "
                                         f"{topology.name}"))
            continue
        bandwidth = topology.link(*key).bandwidth_Bps
        worst = _worst(per)
        if worst is not None and worst[1] > bandwidth * (1 + _EPS):
            at, total, jobs = worst
            out.append(Violation(
                "shared-capacity",
                f"{key[0]}→{key[1]} carries {total / 1e9:.4g} GB/s at {at * 1e6:.4g} us "
                f"({', '.join(sorted(jobs))}), over its {bandwidth / 1e9:.4g} GB/s"))
    return out


def _worst(per: list[tuple[float, int, float, str]]
           ) -> tuple[float, float, set[str]] | None:
    """The instant of the highest summed rate on one link, that rate and its jobs, where
    two jobs or more send at once (one job alone is its own checker's business)."""
    per.sort()
    total, worst = 0.0, None
    active: dict[str, int] = {}
    for at, _, rate, name in per:
        total += rate
        active[name] = active.get(name, 0) + (1 if rate > 0 else -1)
        if rate > 0 and sum(1 for n in active.values() if n) > 1 and (
                worst is None or total > worst[1]):
            worst = (at, total, {n for n, c in active.items() if c})
    return worst
