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

A child runs one computation and leaves with ``os._exit``, collecting no garbage on the
way and freeing nothing it built: a pass that builds millions of objects saves the
seconds that freeing them takes by running in one (:func:`told`, :func:`left_to_exit`),
and can tell the caller how it is getting on as it goes.

>>> job = in_background(sum, [1, 2, 3])
>>> job.result()
6
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from te_ccl.deadline import check, cpu_s, forked, in_child, left, reaped

__all__ = ["Background", "MAX_WORKERS", "WORTH_FORKING", "dealt", "in_background",
           "left_to_exit", "streamed", "told", "workers"]

T = TypeVar("T")
P = TypeVar("P")
WORTH_FORKING = 20_000  # transfers: below, the passes take well under a second and a fork
#                         (with a big parent) costs about what it would save
GRACE_S = 0.25  # past the deadline, for a child to send the TimeLimitReached naming its
#                stage before the caller stops it (its checks may be seconds apart)


FORKED = "waiting for a process it forked"  # a child's stage where nothing names it
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
    """``fn(*args)`` under way in a child process (or not started: computed on demand).
    With ``hear``, ``fn`` is called as ``fn(tell, *args)``, and each ``tell(message)``
    reaches ``hear(message)`` while :meth:`result` waits (computed here, ``hear`` itself
    is ``tell``). A ``low_priority`` child runs at the lowest priority (nice 19): only
    on a core that the compile's other processes leave idle. ``doing``: the stage a
    child stopped past the deadline before it told anything is named by."""

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...],
                 hear: Callable[[Any], None] | None = None, low_priority: bool = False,
                 doing: str = FORKED) -> None:
        self._fn, self._args, self._hear, self._doing = fn, args, hear, doing
        self._pid, self._fd = -1, -1
        if hasattr(os, "fork"):
            read, write = os.pipe()
            cpu = cpu_s()  # the machine's slowdown, read in the child, counts it (in_child)
            pid = os.fork()
            if pid == 0:  # the child: compute, send, and leave without the parent's cleanup
                os.close(read)
                in_child(cpu)
                if low_priority:
                    os.nice(19)
                _child(write, fn, args, hear is not None)
            os.close(write)
            forked(pid)  # its CPU counts in the slowdown while it runs
            self._pid, self._fd = pid, read

    def result(self) -> T:
        """The value of ``fn(*args)``; what it raised is raised here."""
        out = self._collect(self._hear)
        if out is None:
            return self._fn(*self._args) if self._hear is None else \
                self._fn(self._hear, *self._args)
        ok, value = out
        if ok:
            return value
        raise value

    def hurry(self) -> None:
        """Run a ``low_priority`` child at the caller's priority from now on: the work it
        gave way to is done, and on a machine busy with other processes a child at the
        lowest priority barely runs. Where the system refuses, it stays as it is."""
        if self._pid > 0:
            try:
                os.setpriority(os.PRIO_PROCESS, self._pid, os.getpriority(os.PRIO_PROCESS, 0))
            except (OSError, AttributeError):  # no permission, or no priorities here
                pass

    def cancel(self) -> None:
        """Stop the child (its result is no longer wanted)."""
        if self._pid > 0:
            os.kill(self._pid, signal.SIGKILL)
        self._collect(None)

    def _collect(self, hear: Callable[[Any], None] | None) -> tuple[bool, Any] | None:
        """The child's ``(ok, value)``, None if there is none, its messages passed to
        ``hear`` on the way; reaps the child. A child stopped past the deadline raises
        :class:`~te_ccl.deadline.TimeLimitReached` naming its last message, the stage
        it was in."""
        if self._pid <= 0:
            return None
        out, late, doing = None, _Late(self._pid), self._doing
        try:
            with os.fdopen(self._fd, "rb") as pipe:
                while (frame := _read_frame(pipe)) is not None:
                    final, value = frame
                    if final:
                        out = value
                        break
                    if hear is not None:
                        hear(value)
                        doing = str(value)
        except BaseException:  # hear failed, or an interrupt: the child is not wanted
            os.kill(self._pid, signal.SIGKILL)
            raise
        finally:
            late.reaping()
            try:
                os.waitpid(self._pid, 0)
            finally:  # an interrupted wait still leaves the child out of the slowdown
                reaped(self._pid)
                self._pid = -1
        if out is None and late.stopped:
            check(doing)
        return out


class _Late:
    """Stops child ``pid`` once the deadline (:mod:`te_ccl.deadline`) is :data:`GRACE_S`
    behind, while its caller waits for it: the caller's wait is then bounded however
    far apart the child's own checks are. None is started without a deadline."""

    def __init__(self, pid: int) -> None:
        self._pid, self._lock, self.stopped = pid, threading.Lock(), False
        self._timer: threading.Timer | None = None
        if left() != float("inf"):
            self._timer = threading.Timer(left() + GRACE_S, self._stop)
            self._timer.daemon = True
            self._timer.start()

    def _stop(self) -> None:
        with self._lock:
            if self._pid > 0:
                self.stopped = True
                os.kill(self._pid, signal.SIGKILL)

    def reaping(self) -> None:
        """The child is being reaped: its pid may be reused from now on (and no thread is
        left to a fork that follows)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
        with self._lock:
            self._pid = -1


def _read_frame(pipe: Any) -> tuple[bool, Any] | None:
    """One ``(final, value)`` the child wrote (:func:`_write_frame`), None at the end of
    the pipe or on what does not unpickle."""
    head = pipe.read(_HEAD)
    if len(head) < _HEAD:
        return None
    body = pipe.read(int.from_bytes(head, "big"))
    try:
        return pickle.loads(body)
    except Exception:  # noqa: BLE001 - cut short, or a value that does not unpickle
        return None


def _write_frame(pipe: Any, frame: tuple[bool, Any]) -> None:
    data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(len(data).to_bytes(_HEAD, "big"))
    pipe.write(data)
    pipe.flush()


_HEAD = 8  # bytes of a frame's length


_LEFT: list[Any] = []  # in a child: what :func:`left_to_exit` keeps from being freed
_in_child = False


def left_to_exit(*objects: Any) -> None:
    """In a forked child, keep ``objects`` alive until it leaves, which frees nothing:
    a function returning from a pass over millions of objects would otherwise free them
    one by one first. Elsewhere nothing happens."""
    if _in_child:
        _LEFT.append(objects)


def _child(fd: int, fn: Callable[..., Any], args: tuple[Any, ...], telling: bool) -> None:
    global _in_child
    _in_child = True
    # no collection: it would scan what is left to exit, all of it young (allocated
    # while te_ccl.nogc paused collection), and the passes build no garbage cycles
    gc.disable()
    code = 0
    try:
        with os.fdopen(fd, "wb") as pipe:
            def tell(message: Any) -> None:
                _write_frame(pipe, (False, message))

            try:
                out = (True, fn(tell, *args) if telling else fn(*args))
            except BaseException as e:  # noqa: BLE001 - every outcome goes back to the parent
                out = (False, e)
            try:
                _write_frame(pipe, (True, out))
            except Exception:  # noqa: BLE001 - unpicklable: the parent computes it itself
                pass
    except BaseException:  # noqa: BLE001 - the parent may have gone
        code = 1
    finally:
        os._exit(code)


def streamed(produce: Callable[[Callable[[Any], None]], P],
             consume: Callable[[Iterator[Any]], T]) -> tuple[P, T]:
    """``produce(put)`` here and ``consume(items)`` in a forked process at the same time,
    ``items`` being what ``produce`` puts, in order, as it puts it (pickled down a pipe);
    the values of both. Without ``os.fork``, or if the child leaves no result,
    ``consume`` runs here once ``produce`` is done, on the items kept here.

    >>> streamed(lambda put: [put(i) for i in range(3)] and "made", sum)
    ('made', 3)
    """
    kept: list[Any] = []
    if not hasattr(os, "fork"):
        return produce(kept.append), consume(iter(kept))
    parent = os.getpid()
    read, write = os.pipe()

    def consumed() -> T:
        if os.getpid() == parent:  # the child left no result: from what was kept
            return consume(iter(kept))
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            def items() -> Iterator[Any]:
                while (frame := _read_frame(pipe)) is not None and not frame[0]:
                    yield frame[1]
            return consume(items())

    job = in_background(consumed)
    os.close(read)
    pipe: Any = os.fdopen(write, "wb")

    def put(item: Any) -> None:
        nonlocal pipe
        kept.append(item)
        if pipe is not None:
            try:
                _write_frame(pipe, (False, item))
            except OSError:  # the child has left: its result (or its absence) tells
                pipe = None

    try:
        made = produce(put)
    except BaseException:
        job.cancel()
        raise
    finally:
        if pipe is not None:
            try:
                _write_frame(pipe, (True, None))
                pipe.close()
            except OSError:
                pass
    return made, job.result()


def in_background(fn: Callable[..., T], *args: Any, low_priority: bool = False,
                  doing: str = FORKED) -> Background[T]:
    """Start ``fn(*args)`` in a forked process (at the lowest priority if
    ``low_priority``); ``.result()`` waits for its value (past the deadline, naming
    ``doing`` if the child could not name its stage itself)."""
    return Background(fn, args, low_priority=low_priority, doing=doing)


def told(fn: Callable[..., T], hear: Callable[[Any], None], *args: Any) -> T:
    """``fn(tell, *args)`` computed in a forked process, which leaves without freeing what
    it built; each ``tell(message)`` there reaches ``hear(message)`` here as it happens.
    Where the child leaves no result, ``fn(hear, *args)`` runs here, so ``hear`` may hear
    a message twice.

    >>> told(lambda tell, x: tell(x) or x + 1, print, 1)
    1
    2
    """
    return Background(fn, args, hear).result()


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
