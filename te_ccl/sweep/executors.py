"""Where points run: local worker processes, or the tasks of a Ray cluster.

Both executors yield ``(point, PointResult)`` as points complete, in completion order;
the caller stores each one at once, so an interrupted sweep keeps every finished point.
Every point solves with one thread (``SolveParams.threads=1`` from the grid): the
parallelism is across points, which scales far better than threads inside one CP-SAT
solve. Ray is imported only when asked for, so it stays an optional extra.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from te_ccl.errors import SpecError
from te_ccl.sweep.points import Point
from te_ccl.sweep.run import PointResult, failure_record, run_point

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "import_ray"]

Outcome = tuple[Point, PointResult]


class Executor(Protocol):
    """Runs points; ``capacity`` is how many run at once (for the progress display)."""

    capacity: int
    description: str

    def run(self, points: Sequence[Point]) -> Iterator[Outcome]: ...


class LocalExecutor:
    """A pool of ``workers`` processes on this machine (spawned: no state forked from a
    parent that runs a progress-display thread)."""

    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            raise SpecError(f"expected at least 1 worker, got {workers}", key="--workers")
        self.capacity = workers
        self.description = f"{workers} local worker{'s' if workers > 1 else ''}"

    def run(self, points: Sequence[Point]) -> Iterator[Outcome]:
        if not points:
            return
        pool = ProcessPoolExecutor(max_workers=min(self.capacity, len(points)),
                                   mp_context=multiprocessing.get_context("spawn"))
        finished = False
        try:
            futures = {pool.submit(run_point, p): p for p in points}
            for future in as_completed(futures):
                yield futures[future], _local_result(future, futures[future])
            finished = True
        finally:
            # interrupted: drop queued points and do not wait for the running ones
            pool.shutdown(wait=finished, cancel_futures=True)


def _local_result(future: Future, point: Point) -> PointResult:
    try:
        return future.result()
    except BrokenProcessPool as e:
        return failure_record(point, "failed", f"worker process died ({e})")


class RayExecutor:
    """Tasks on a Ray cluster (``address``: ``auto``, ``HOST:PORT`` or ``ray://…``).

    If this process already called ``ray.init`` (tests do), that session is used.
    """

    def __init__(self, address: str) -> None:
        self.ray = import_ray()
        if not self.ray.is_initialized():
            try:
                self.ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise SpecError(f"cannot connect to a Ray cluster at {address!r} ({e}); start "
                                "one with `ray start --head`", key="--ray-address") from None
        self.capacity = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.description = f"Ray cluster ({self.capacity} CPUs)"

    def run(self, points: Sequence[Point]) -> Iterator[Outcome]:
        ray = self.ray
        # run_point never raises, so retries only happen when a worker or node dies
        task = ray.remote(num_cpus=1, max_retries=2)(run_point)
        refs: dict[Any, Point] = {task.remote(p): p for p in points}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    yield refs[ref], self._result(ref, refs[ref])
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def _result(self, ref: Any, point: Point) -> PointResult:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            reason = " ".join(str(e).split())[:300]
            return failure_record(point, "failed", f"Ray task failed: {reason}")


def import_ray() -> Any:
    """The ``ray`` module, or a SpecError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise SpecError("Ray is not installed; install it with `pip install teccl[ray]`",
                        key="--ray-address") from None
    return ray
