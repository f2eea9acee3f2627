"""The jobs' summary for people: one row per job, then the objective each way.

Columns: the job's finish time with the joint files together (``joint``), its file
compiled alone with the network to itself (``alone``), and compiled alone but run among
the others' (``together``); all are replays of the files (:mod:`te_ccl.jobs.files`).
``teccl simulate --jobs`` has no joint files: its table shows ``together`` and ``alone``.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from te_ccl.units import format_size, format_time

__all__ = ["jobs_table"]

_COLUMNS = {"joint_s": "joint", "alone_s": "alone", "together_s": "compiled alone, run together"}


def jobs_table(info: dict[str, Any]) -> Table:
    """The table of a ``--json`` object of ``compile --jobs`` or ``simulate --jobs``."""
    times = [k for k in _COLUMNS if k in info["jobs"][0]]
    labels = dict(_COLUMNS) if "joint_s" in times else {"together_s": "together",
                                                         "alone_s": "alone"}
    title = f"{len(info['jobs'])} jobs on {info['topology']}"
    if info.get("method"):
        title += f" (kept: {info['method']})"
    t = Table("job", "collective", "ranks", "size", "weight", *(labels[k] for k in times),
              "deadline", title=title)
    for j in info["jobs"]:
        deadline = "" if j["deadline_s"] is None else (
            format_time(j["deadline_s"]) + ("" if j.get("deadline_met") is None else
                                            " met" if j["deadline_met"] else " missed"))
        t.add_row(j["name"], j["collective"], str(j["ranks"]), format_size(j["size_bytes"]),
                  f"{j['weight']:g}", *(format_time(j[k]) for k in times), deadline)
    name = "makespan" if info["objective"] == "max" else "weighted sum of finish times"
    values = [format_time(info[k[:-2]]) for k in times]
    t.add_section()
    t.add_row(name, "", "", "", "", *values, "")
    if info.get("ratio") is not None:
        checks = info["checks"]
        bound = "" if info.get("bound") is None else (
            f"; lower bound {format_time(info['bound'])} "
            f"({info['bound'] / info['together']:.3f} of it)")
        t.caption = (f"joint / compiled alone, run together: {info['ratio']:.3f}{bound}; "
                     f"{info['shared_links']} link(s) shared; schedule checker: "
                     f"{checks['schedule']} violation(s), shared capacity: "
                     f"{checks['shared_capacity']} link(s) over")
    elif "shared_links" in info:
        t.caption = f"{info['shared_links']} link(s) carry two jobs' bytes or more"
        if info.get("bound") is not None:
            t.caption += f"; lower bound {format_time(info['bound'])}"
    return t
