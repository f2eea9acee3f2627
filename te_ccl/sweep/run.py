"""One point of a sweep: compile, verify, simulate — and never raise.

:func:`run_point` is what every executor runs, in a worker process or a Ray task. It
returns the file (MSCCL XML or MSCCL++ plan) as bytes instead of writing it, so a worker on another node needs no
shared file system: the parent's :mod:`te_ccl.sweep.store` writes everything.

A point that fails (bad horizon, solver gave up, XML refused by the verifier, even a
bug) or overruns its hard limit becomes a record with ``status`` ``failed`` or
``timeout`` and a one-line ``reason``; the sweep goes on.
"""

from __future__ import annotations

import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from te_ccl import __version__
from te_ccl.errors import TecclError
from te_ccl.sweep.points import Point

__all__ = ["PointResult", "PointTimeout", "run_point", "failure_record", "hard_limit_s",
           "TIMING_FIELDS"]

# Fields that differ between two runs of the same point (everything else is reproducible).
TIMING_FIELDS = ("solver_time_s", "wall_time_s", "cpu_time_s", "host")
_SUMMARY_FIELDS = ("solver_time_s", "epochs", "epoch_s", "finish_time_s", "measured_by",
                   "predicted_s", "schedule_replay_s", "algbw_GBps", "busbw_GBps",
                   "lower_bound_s", "bound_ratio", "optimal", "variables", "constraints",
                   "transfers")


class PointTimeout(BaseException):
    """The point overran its hard limit (a BaseException so no library ``except`` eats it)."""


@dataclass(frozen=True)
class PointResult:
    """The point's record (JSON-able, one row of ``index.csv``) and its file if it succeeded."""

    record: dict[str, Any]
    data: bytes | None = None


def hard_limit_s(point: Point) -> float:
    """Wall-clock cap of a point: the solver's budget plus room to lower, verify, simulate."""
    return 1.5 * point.params.time_limit_s + 10.0


def run_point(point: Point) -> PointResult:
    """Compile, verify (the pipeline verifies the file before returning it) and simulate."""
    start = time.monotonic(), time.process_time()
    try:
        with _watchdog(hard_limit_s(point)):
            record, data = _compile(point)
    except PointTimeout:
        return failure_record(point, "timeout", f"stopped after the point's hard limit of "
                                                f"{hard_limit_s(point):.0f}s", start)
    except TecclError as e:
        return failure_record(point, "failed", f"{type(e).__name__}: {e}", start)
    except Exception as e:  # noqa: BLE001 - a bug in one point must not stop the sweep
        return failure_record(point, "failed", f"internal error: {type(e).__name__}: {e}", start)
    return PointResult({**record, **_elapsed(start)}, data)


def _elapsed(start: tuple[float, float] | None) -> dict[str, float | None]:
    """Wall and CPU seconds since ``start`` (``(monotonic, process_time)``); CPU well below
    wall means the point waited for a CPU (or a solver time budget)."""
    if start is None:
        return {"wall_time_s": None, "cpu_time_s": None}
    return {"wall_time_s": round(time.monotonic() - start[0], 4),
            "cpu_time_s": round(time.process_time() - start[1], 4)}


def failure_record(point: Point, status: str, reason: str,
                   start: tuple[float, float] | None = None) -> PointResult:
    """The record of a point that produced no algorithm."""
    return PointResult({**_base(point, status, reason), **_elapsed(start)})


def _base(point: Point, status: str, reason: str) -> dict[str, Any]:
    return {"key": point.key, "name": point.name, "status": status, "reason": reason,
            **point.inputs(), "teccl_version": __version__, "host": socket.gethostname()}


def _compile(point: Point) -> tuple[dict[str, Any], bytes]:
    from te_ccl.compiler import CompileOptions, compile_collective, summary

    min_bytes, max_bytes = point.size.xml_bounds
    with tempfile.TemporaryDirectory(prefix="teccl-sweep-") as tmp:
        out = Path(tmp) / point.file_name
        options = CompileOptions(output=str(out), fmt=point.fmt, min_bytes=min_bytes,
                                 max_bytes=max_bytes, name=point.name)
        result = compile_collective(point.topology, point.collective, point.params, options)
        data = out.read_bytes()
    info = summary(result, point.topology)
    record = _base(point, "ok", "")
    record.update({k: info[k] for k in _SUMMARY_FIELDS})
    record["backend_used"] = info["backend"]
    record["solver_status"] = info["status"]
    record["notes"] = "; ".join(info["notes"])
    return record, data


@contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    """Raise :class:`PointTimeout` after ``seconds`` (main thread of a POSIX process only;
    OR-Tools returns within its own time limit, so the signal is handled soon after)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise PointTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
