"""The machine's slowdown counts the CPU of the children a compile forked while they run,
not only once they are reaped (a forked lowering is not a slow machine)."""

from __future__ import annotations

import os
import resource
import time

import pytest

import te_ccl.deadline as deadline
from te_ccl.background import in_background
from te_ccl.deadline import cpu_s, forked, reaped, until

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.exists("/proc/self/stat"),
                                reason="forks and /proc")
BURN_S = 0.2


def _burn_then_wait(fd: int) -> float:
    """Use BURN_S of CPU, then wait (idle) until ``fd`` is readable; its CPU."""
    while sum(os.times()[:2]) < BURN_S:
        pass
    os.read(fd, 1)
    return sum(os.times()[:2])


def _reaped_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def test_a_running_child_counts_before_it_is_reaped():
    read, write = os.pipe()
    try:
        job = in_background(_burn_then_wait, read)
        reaped_before = _reaped_cpu_s()
        for _ in range(3000):  # waits for the child's CPU, however slow the machine
            if deadline._live_cpu_s() >= BURN_S:
                break
            time.sleep(0.01)
        assert deadline._live_cpu_s() >= BURN_S  # counted while it runs
        assert _reaped_cpu_s() == reaped_before  # which getrusage does not
        os.write(write, b"x")
        assert job.result() >= BURN_S
    finally:
        os.close(read)
        os.close(write)
    assert not deadline._LIVE and deadline._live_cpu_s() == 0.0  # reaped: getrusage has it
    assert _reaped_cpu_s() >= reaped_before + BURN_S * 0.9


def _parents_cpu_at_fork() -> tuple[float, float]:
    return deadline._AT_FORK[0], deadline.slowdown()


def test_a_child_counts_its_parents_cpu_under_the_deadline():
    with until(600):
        while cpu_s() < 0.05:  # some CPU of the parent's before the fork
            pass
        before = cpu_s()
        at_fork, slowdown = in_background(_parents_cpu_at_fork).result()
    assert before <= at_fork <= cpu_s() and slowdown >= 1.0
    assert deadline._AT_FORK[0] == 0.0  # the parent's own count is untouched


def _grandchilds_cpu_at_fork() -> tuple[float, float]:
    return in_background(_parents_cpu_at_fork).result()


def test_a_grandchild_counts_the_cpu_of_both_its_parents():
    """A child forked by a forked child (a forked lowering's dealt passes) counts the
    compile's CPU before the first fork too, not only its own parent's."""
    with until(600):
        while cpu_s() < 0.05:
            pass
        before = cpu_s()
        at_fork, slowdown = in_background(_grandchilds_cpu_at_fork).result()
    assert at_fork >= before and slowdown >= 1.0


def test_no_proc_entry_counts_nothing():
    """A child said forked that /proc does not show (reaped between the listing and the
    reading, or no /proc) is counted as nothing, without an error."""
    gone = 2 ** 22 + 1  # above any pid_max: no such process
    forked(gone)
    try:
        assert deadline._live_cpu_s() == 0.0
        assert deadline.slowdown() >= 1.0
    finally:
        reaped(gone)


def test_a_wait_that_fails_still_says_the_child_was_reaped(monkeypatch):
    """A wait interrupted once the child is gone (a signal) still takes it out of the
    children counted: it is reaped, and its pid may be another process's."""
    import te_ccl.background as background

    said: list[int] = []
    real_wait = os.waitpid

    def interrupted(pid: int, options: int) -> tuple[int, int]:
        real_wait(pid, options)
        raise KeyboardInterrupt

    def spy(pid: int) -> None:
        said.append(pid)
        reaped(pid)

    monkeypatch.setattr(background, "reaped", spy)
    monkeypatch.setattr(os, "waitpid", interrupted)
    job = in_background(os.getpid)
    with pytest.raises(KeyboardInterrupt):
        job.result()
    assert len(said) == 1 and said[0] != os.getpid()
