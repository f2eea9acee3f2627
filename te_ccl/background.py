"""Run a function in a forked process while the caller goes on with other work.

At thousands of GPUs a compile spends minutes in passes that read the same data and
do not depend on each other: the independent schedule checker and the lowering, the
verifier and the replay of the written file. On a machine with a second core, forking
one of them off runs both at once. The child shares the parent's memory copy-on-write
(nothing is pickled on the way in), and sends back only its (small) result.

Where ``os.fork`` does not exist, or the child dies without a result (killed, out of
memory), :meth:`Background.result` computes the value in the caller instead: the
answer is the same, only later. An exception in the child is raised by ``result()``
as if the call had run there.

>>> job = in_background(sum, [1, 2, 3])
>>> job.result()
6
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["Background", "MAX_WORKERS", "WORTH_FORKING", "dealt", "in_background", "workers"]

T = TypeVar("T")
P = TypeVar("P")
WORTH_FORKING = 20_000  # transfers: below, the passes take well under a second and a fork
#                         (with a big parent) costs about what it would save


MAX_WORKERS = 4  # a fork copies every page of the parent it touches (reference counts too)


def workers() -> int:
    """Processes worth running side by side: the cores this process may run on, at most
    :data:`MAX_WORKERS`."""
    if hasattr(os, "sched_getaffinity"):
        n = len(os.sched_getaffinity(0))
    else:
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_WORKERS))


class Background(Generic[T]):
    """``fn(*args)`` under way in a child process (or not started: computed on demand)."""

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...]) -> None:
        self._fn, self._args = fn, args
        self._pid, self._fd = -1, -1
        if hasattr(os, "fork"):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: compute, send, and leave without the parent's cleanup
                os.close(read)
                _child(write, fn, args)
            os.close(write)
            self._pid, self._fd = pid, read

    def result(self) -> T:
        """The value of ``fn(*args)``; what it raised is raised here."""
        out = self._collect()
        if out is None:
            return self._fn(*self._args)
        ok, value = out
        if ok:
            return value
        raise value

    def cancel(self) -> None:
        """Stop the child (its result is no longer wanted)."""
        if self._pid > 0:
            os.kill(self._pid, signal.SIGKILL)
        self._collect()

    def _collect(self) -> tuple[bool, Any] | None:
        """The child's ``(ok, value)``, None if there is none; reaps the child."""
        if self._pid <= 0:
            return None
        chunks = []
        with os.fdopen(self._fd, "rb") as pipe:
            while chunk := pipe.read(1 << 20):
                chunks.append(chunk)
        os.waitpid(self._pid, 0)
        self._pid = -1
        try:
            return pickle.loads(b"".join(chunks))
        except Exception:  # noqa: BLE001 - no result, or one that does not unpickle
            return None


def _child(fd: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    code = 0
    try:
        try:
            out = (True, fn(*args))
        except BaseException as e:  # noqa: BLE001 - every outcome goes back to the parent
            out = (False, e)
        try:
            data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - unpicklable: the parent computes it itself
            data = b""
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(data)
    except BaseException:  # noqa: BLE001 - the parent may have gone
        code = 1
    finally:
        os._exit(code)


def in_background(fn: Callable[..., T], *args: Any) -> Background[T]:
    """Start ``fn(*args)`` in a forked process; ``.result()`` waits for its value."""
    return Background(fn, args)


def dealt(here: Callable[[P], Any], forked: Callable[[P], Any], parts: Sequence[P]
          ) -> list[Any]:
    """``here(parts[0])``, computed in this process, then ``forked(part)`` of every other
    part, each in a forked process at the same time; the forked ones are stopped if any
    part fails. Two functions, since what stays here may report progress or return
    objects the caller must keep by identity.

    >>> dealt(sum, len, [[1, 2], [3, 4, 5]])
    [3, 3]
    """
    jobs = [in_background(forked, part) for part in parts[1:]]
    try:
        return [here(parts[0]), *(job.result() for job in jobs)]
    except BaseException:
        for job in jobs:
            job.cancel()
        raise
