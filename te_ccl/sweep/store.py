"""The results directory of a sweep: MSCCL-ready, resumable, never half-written.

Layout::

    DIR/index.csv                 one row per point of the grid, every metric
    DIR/points/NAME.xml           the algorithm of every successful point
    DIR/records/KEY.json          one record per finished point (ok, failed or timeout)
    DIR/msccl/TOPOLOGY/NAME.xml   MSCCL_ALGO_DIR for a cluster of that topology

With ``--format mscclpp`` a point's algorithm is an MSCCL++ execution plan,
``points/NAME.json``, and the winners go to ``DIR/mscclpp/TOPOLOGY/NAME.json`` (each
plan's ``min_message_size``/``max_message_size`` is its size range). The ``xml`` column
names the point's file in either format.

Names from the grid's inputs enter paths only as one safe component each
(:func:`te_ccl.outputs.path_component`), and every directory is created as one new entry
of an existing one, never through a symbolic link (:func:`te_ccl.outputs.make_output_dir`).

A point's XML is written before its record, and both atomically, so a record on disk
means the point is complete — that is what resume trusts, and why Ctrl-C loses
nothing that finished. Several points may serve the same messages (chunkings,
protocols, backends of one size range); ``msccl/TOPOLOGY`` holds only the fastest of
each group (by ``finish_time_s``, the replay of the point's XML), so the runtime's choice
by ``minBytes`` / ``maxBytes`` is unambiguous and the best one. Rooted collectives are
compiled and indexed but never published there: the runtime selects an algorithm by
collective and size, not by root, so a root-0 broadcast would run for every root
(their ``selected`` is false and their notes say why).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from te_ccl.outputs import make_output_dir, path_component, write_atomic
from te_ccl.sweep.points import FORMATS, Point
from te_ccl.sweep.run import PointResult

__all__ = ["COLUMNS", "ResultStore"]

COLUMNS = (
    "name", "key", "status", "reason", "topology", "collective", "root", "ranks", "ngpus",
    "size_bytes", "min_bytes", "max_bytes", "chunks", "inplace", "proto", "backend",
    "backend_used", "time_limit_s", "epochs", "epoch_s", "finish_time_s", "measured_by",
    "predicted_s", "schedule_replay_s", "lower_bound_s", "bound_ratio", "algbw_GBps", "busbw_GBps", "optimal",
    "solver_status", "solver_time_s", "wall_time_s", "cpu_time_s", "variables", "constraints",
    "transfers", "format", "xml", "xml_sha256", "selected", "notes", "teccl_version", "host",
)


class ResultStore:
    """Reads and writes one results directory (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def prepare(self) -> None:
        """Create the directory (one new entry of an existing directory) and its
        ``records/`` before any point runs, so an unusable one fails first."""
        make_output_dir(self.root, key="--output")
        make_output_dir(self.root / "records")

    def record_path(self, point: Point) -> Path:
        return self.root / "records" / f"{point.key}.json"

    def msccl_dir(self, topology_name: str, fmt: str = "xml") -> Path:
        """The library of a topology (its name as one path component): the
        ``MSCCL_ALGO_DIR`` of its XML, or the directory of its MSCCL++ plans."""
        return self.root / ("mscclpp" if fmt == "mscclpp" else "msccl") / path_component(
            topology_name)

    @staticmethod
    def file_path(point: Point) -> str:
        """Where the point's file is, relative to the results directory."""
        return f"points/{point.file_name}"

    def load(self, point: Point) -> dict[str, Any] | None:
        """The stored record of ``point`` if it is complete (its XML intact), else None."""
        try:
            record = json.loads(self.record_path(point).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("key") != point.key:
            return None
        if record.get("status") == "ok":
            if record.get("xml") != self.file_path(point):
                return None  # only the point's own file is trusted (and later copied)
            try:
                data = (self.root / record["xml"]).read_bytes()
            except OSError:
                return None
            if hashlib.sha256(data).hexdigest() != record.get("xml_sha256"):
                return None
        return record

    def save(self, point: Point, result: PointResult) -> dict[str, Any]:
        """Write the point's file (if any), then its record; returns the stored record."""
        record = dict(result.record)
        if result.data is not None:
            rel = self.file_path(point)
            make_output_dir(self.root / "points")
            write_atomic(self.root / rel, result.data)
            record["xml"] = rel
            record["xml_sha256"] = hashlib.sha256(result.data).hexdigest()
        write_atomic(self.record_path(point), json.dumps(record, indent=2, sort_keys=True) + "\n")
        return record

    def finish(self, points: list[Point], records: dict[str, dict[str, Any]]) -> Path:
        """Publish the winners to ``msccl/`` and write ``index.csv`` for the grid's points."""
        winners = self._winners(points, records)
        self._publish(points, records, winners)
        rows = []
        for p in points:
            record = records.get(p.key)
            if record is None:  # interrupted before this point ran
                record = {"name": p.name, "key": p.key, "status": "pending", **p.inputs()}
            rows.append({**record, "selected": p.key in winners})
        index = self.root / "index.csv"
        write_atomic(index, _csv(rows))
        return index

    @staticmethod
    def _winners(points: list[Point], records: dict[str, dict[str, Any]]) -> set[str]:
        best: dict[tuple, tuple] = {}
        for p in points:
            r = records.get(p.key)
            if r is None or r.get("status") != "ok" or p.collective.root is not None:
                continue
            rank = (r["finish_time_s"], p.name)
            if p.group not in best or rank < best[p.group][0]:
                best[p.group] = (rank, p.key)
        return {key for _, key in best.values()}

    def _publish(self, points: list[Point], records: dict[str, dict[str, Any]],
                 winners: set[str]) -> None:
        # each library folder: the suffix of its files, and the winners' names in it
        keep: dict[Path, tuple[str, set[str]]] = {
            self.msccl_dir(p.topology.name, p.fmt): (FORMATS[p.fmt], set()) for p in points}
        for p in points:
            if p.key in winners:
                folder = self.msccl_dir(p.topology.name, p.fmt)
                make_output_dir(folder.parent)
                make_output_dir(folder)
                write_atomic(folder / p.file_name,
                             (self.root / self.file_path(p)).read_bytes())
                keep[folder][1].add(p.file_name)
        for folder, (suffix, names) in keep.items():
            for stale in folder.glob(f"*.{suffix}") if folder.is_dir() else ():
                if stale.name not in names and not stat.S_ISDIR(stale.lstat().st_mode):
                    stale.unlink()


def _csv(rows: Iterable[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
    return buf.getvalue()
