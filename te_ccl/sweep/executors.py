"""Where points run: local worker processes, or the tasks of a Ray cluster.

Both executors yield ``(point, PointResult)`` as points complete, in completion order;
the caller stores each one at once, so an interrupted sweep keeps every finished point.
Every point solves with one thread (``SolveParams.threads=1`` from the grid): the
parallelism is across points, which scales far better than threads inside one CP-SAT
solve. Ray is imported only when asked for, so it stays an optional extra.
"""

from __future__ import annotations

import multiprocessing
import socket
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol
from urllib.parse import urlsplit

from te_ccl.deadline import left
from te_ccl.errors import SpecError
from te_ccl.sweep.points import Point
from te_ccl.sweep.run import PointResult, failure_record, run_point

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "import_ray", "check_reachable"]

Outcome = tuple[Point, PointResult]
CONNECT_TIMEOUT_S = 3.0  # a live head accepts at once; ray.init waits up to a minute for a dead one
PORTS = {"": 6379, "ray": 10001}  # Ray's default GCS and Ray Client ports, by URL scheme


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
        """Run ``points``; a worker that dies (segfault, OOM kill) takes down the whole pool,
        so the points it broke run again in halves until the one that kills its worker
        is alone — only that one is recorded as failed."""
        batches = [list(points)] if points else []
        while batches:
            batch = batches.pop()
            broken = yield from self._run_pool(batch)
            if len(batch) == 1 and broken:
                yield batch[0], failure_record(batch[0], "failed", "worker process died "
                                               "(crash or killed, e.g. out of memory)")
            elif broken:
                half = max(1, len(broken) // 2)
                batches += [b for b in (broken[half:], broken[:half]) if b]

    def _run_pool(self, points: list[Point]) -> Generator[Outcome, None, list[Point]]:
        """Yield what completes in one pool; return the points a broken pool took down."""
        pool = ProcessPoolExecutor(max_workers=min(self.capacity, len(points)),
                                   mp_context=multiprocessing.get_context("spawn"))
        finished, broken = False, []
        try:
            futures = {pool.submit(run_point, p): p for p in points}
            for future in as_completed(futures):
                try:
                    result = future.result()
                except BrokenProcessPool:
                    broken.append(futures[future])
                    continue
                yield futures[future], result
            finished = True
        finally:
            # interrupted: drop queued points and do not wait for the running ones
            pool.shutdown(wait=finished, cancel_futures=True)
        return sorted(broken, key=points.index)


class RayExecutor:
    """Tasks on a Ray cluster (``address``: ``auto``, ``HOST:PORT`` or ``ray://…``).

    If this process already called ``ray.init`` (tests do), that session is used.
    """

    def __init__(self, address: str) -> None:
        self.ray = import_ray()
        if not self.ray.is_initialized():
            check_reachable(address)
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


def check_reachable(address: str) -> None:
    """A SpecError naming ``address`` unless its host accepts a TCP connection on its port
    within :data:`CONNECT_TIMEOUT_S` (less where the deadline leaves less): ``ray.init``
    has no timeout and, given a dead ``HOST:PORT`` or ``ray://HOST:PORT``, waits on it for
    a minute or more. ``auto`` and ``local`` name no host (Ray finds or starts one)."""
    if address in ("auto", "local"):
        return
    scheme, _, rest = address.rpartition("://")
    try:
        parts = urlsplit(f"//{rest}")
        host, port = parts.hostname, parts.port or PORTS.get(scheme)
    except ValueError as e:  # a port that is not a number, an unclosed [IPv6 address
        raise SpecError(f"expected auto, HOST:PORT or ray://HOST:PORT, got {address!r} ({e})",
                        key="--ray-address") from None
    if not host or port is None:
        raise SpecError(f"expected auto, HOST:PORT or ray://HOST:PORT, got {address!r}",
                        key="--ray-address")
    timeout = max(1e-3, min(CONNECT_TIMEOUT_S, left()))  # 0 would make the socket non-blocking
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except (OSError, UnicodeError) as e:  # refused, unreachable, unknown host (or one
        #                                    IDNA cannot encode), or no answer in time
        why = f"no answer in {timeout:.2g} s" if isinstance(e, TimeoutError) else \
            (getattr(e, "strerror", None) or str(e))
        raise SpecError(f"cannot reach a Ray cluster at {address!r}: {host} port {port}: "
                        f"{why}; start one with `ray start --head`",
                        key="--ray-address") from None


def import_ray() -> Any:
    """The ``ray`` module, or a SpecError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise SpecError("Ray is not installed; install it with `pip install teccl[ray]`",
                        key="--ray-address") from None
    return ray
