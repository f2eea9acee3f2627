"""What a compile's FRED tables and schedule ask of the switches, against what they have.

* **Configuration SRAM** (the FRED paper: 1.5 KB per switch): the bytes of the distinct
  encoded configurations (:mod:`te_ccl.fred.encoding`) a switch's phases select; phases
  with the same µSwitch settings share one.
* **Buffer**: TE-CCL's buffer metric, for the switches too: the most bytes of chunks a
  switch holds from one epoch into a later one (a chunk arriving in epoch ``a`` and last
  leaving in epoch ``l`` is held across the ``l − a`` epoch boundaries in between). A
  switch without buffer forwards every chunk in the epoch it arrives (the flow model's
  rules (3) and (5), :mod:`te_ccl.model.constraints`), so it holds none: within an epoch
  the chunk passes through, and the per-epoch link capacities balance what enters and
  leaves it. What the switches run is the tables' cut-through timeline
  (:mod:`te_ccl.fred.from_schedule`): a stream takes one lane on every link of its tree,
  so it enters and leaves at one lane's rate and a switch holds a 4 KB packet per lane,
  within the :attr:`~te_ccl.fred.wafer.Wafer.channel_buffer_bytes` (24 KB) of each data
  channel of each port.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from te_ccl.fred.encoding import SRAM_BYTES
from te_ccl.schedule import Schedule
from te_ccl.units import format_size, format_time

__all__ = ["switch_buffer_bytes", "fabric_report"]


def switch_buffer_bytes(schedule: Schedule, switches: Mapping[str, Any]) -> dict[str, int]:
    """Per switch, the most bytes of chunks it holds across an epoch boundary in
    ``schedule`` (module docstring): chunk 0 passes ``sw`` in the epoch it arrives, chunk 1
    waits there one epoch.

    >>> from te_ccl.collective import Collective, CollectiveKind
    >>> from te_ccl.schedule import Transfer
    >>> from te_ccl.topology.generators import star
    >>> topo = star(2, 1e9)
    >>> coll = Collective(CollectiveKind.ALLGATHER, 2000, (0, 1))
    >>> s = Schedule(topo, coll, 1e-6, (Transfer(0, "g0", "sw", 0, 1), Transfer(0, "sw", "g1", 1, 2),
    ...     Transfer(1, "g1", "sw", 0, 1), Transfer(1, "sw", "g0", 2, 3)))
    >>> switch_buffer_bytes(s, {"sw": None})
    {'sw': 1000}
    """
    arrivals: dict[tuple[str, int], set[int]] = defaultdict(set)
    departures: dict[tuple[str, int], list[int]] = defaultdict(list)
    for t in schedule.transfers:
        if t.dst in switches:
            arrivals[(t.dst, t.chunk)].add(t.arrive_epoch)
        if t.src in switches:
            departures[(t.src, t.chunk)].append(t.start_epoch)
    change: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for (sw, chunk), epochs in arrivals.items():
        arrive = sorted(epochs)
        for i, a in enumerate(arrive):
            until = arrive[i + 1] if i + 1 < len(arrive) else None
            last = max((d for d in departures[(sw, chunk)]
                        if d >= a and (until is None or d < until)), default=a)
            change[sw][a] += 1  # held at the ends of epochs a .. last-1
            change[sw][last] -= 1
    out = {}
    for sw in switches:
        held = peak = 0
        for e in sorted(change[sw]):
            held += change[sw][e]
            peak = max(peak, held)
        out[sw] = peak * schedule.chunk_bytes
    return out


def _worst(use: Mapping[str, int], limit: Mapping[str, int]) -> str:
    """The switch using the largest share of its limit (the first by name among equals)."""
    return max(sorted(use), key=lambda s: use[s] / limit[s]) if use else ""


def fabric_report(fabric: str, sram: Mapping[str, int], buffers: Mapping[str, int],
                  buffer_limits: Mapping[str, int], *, tables_time_s: float, phases: int,
                  streams: int) -> dict[str, Any]:
    """The ``fabric`` object of ``teccl compile --json``: each switch's SRAM and buffer
    use against its limit, the worst of each, ``fits``, and a one-line ``warning`` (None
    when everything fits)."""
    switches = sorted(set(sram) | set(buffers))
    sram_use = {s: sram.get(s, 0) for s in switches}
    sram_limit = dict.fromkeys(switches, SRAM_BYTES)
    worst_sram, worst_buffer = _worst(sram_use, sram_limit), _worst(buffers, buffer_limits)
    sram_fits = all(n <= SRAM_BYTES for n in sram_use.values())
    buffer_fits = all(buffers[s] <= buffer_limits[s] for s in buffers)
    problems = []
    if not sram_fits:
        problems.append(f"{worst_sram} needs {format_size(sram_use[worst_sram])} of "
                        f"configuration SRAM (has {format_size(SRAM_BYTES)})")
    if not buffer_fits:
        problems.append(f"the schedule holds {format_size(buffers[worst_buffer])} of chunks "
                        f"in {worst_buffer} (buffers {format_size(buffer_limits[worst_buffer])}"
                        f"); its tables stream them cut-through in {format_time(tables_time_s)}")
    return {
        "fits": sram_fits and buffer_fits,
        "sram_fits": sram_fits,
        "sram_bytes_max": sram_use[worst_sram] if worst_sram else 0,
        "sram_limit_bytes": SRAM_BYTES,
        "sram_switch": worst_sram,
        "buffer_fits": buffer_fits,
        "buffer_bytes_max": buffers[worst_buffer] if worst_buffer else 0,
        "buffer_limit_bytes": buffer_limits[worst_buffer] if worst_buffer else 0,
        "buffer_switch": worst_buffer,
        "tables_time_s": tables_time_s,
        "phases": phases,
        "streams": streams,
        "switches": {s: {"sram_bytes": sram_use[s], "buffer_bytes": buffers.get(s, 0),
                         "buffer_limit_bytes": buffer_limits.get(s, 0)} for s in switches},
        "warning": f"{fabric}: " + "; ".join(problems) if problems else None,
    }
