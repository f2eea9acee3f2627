"""The machine's slowdown counts the CPU of the children a compile forked while they run,
not only once they are reaped (a forked lowering is not a slow machine)."""

from __future__ import annotations

import os
import resource
import time

import pytest

from te_ccl.background import in_background
from te_ccl.deadline import cpu_s, forked, reaped, slowdown, until

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.exists("/proc/self/stat"),
                                reason="forks and /proc")
BURN_S = 0.2
IDLE_S = 0.3


def _burn_then_wait(burned: int, go: int) -> float:
    """Use BURN_S of CPU, say so on ``burned``, then wait (idle) until ``go`` is readable;
    its CPU."""
    while sum(os.times()[:2]) < BURN_S:
        pass
    os.write(burned, b"x")
    os.read(go, 1)
    return sum(os.times()[:2])


def _reaped_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _counts(cpu: float, since: float) -> bool:
    """Whether the slowdown counts at least ``cpu`` CPU seconds since ``since`` (a clock
    read before the deadline began): it is then at most the clock's time over them."""
    return slowdown() <= max(1.0, (time.monotonic() - since) / cpu)


def test_a_running_child_counts_before_it_is_reaped():
    """The child burns BURN_S while this process waits idle: counted, the slowdown is at
    most the time since over BURN_S; not counted, it would be the time over the little
    CPU this process used."""
    burned, said = os.pipe()
    go, tell = os.pipe()
    since = time.monotonic()
    job = in_background(_burn_then_wait, said, go)
    try:
        with until(600):
            reaped_before = _reaped_cpu_s()
            os.read(burned, 1)
            assert _counts(BURN_S, since)  # counted while it runs
            assert _reaped_cpu_s() == reaped_before  # which getrusage does not
            os.write(tell, b"x")
            assert job.result() >= BURN_S
            assert _counts(BURN_S, since)  # and once reaped, by getrusage
    finally:
        job.cancel()  # a child not waited for (a failed assert) would wait for ever
        for fd in (burned, said, go, tell):
            os.close(fd)
    assert _reaped_cpu_s() >= reaped_before + BURN_S * 0.9


def _idle_slowdown() -> float:
    """The slowdown read after IDLE_S idle: above 1 only where the CPU of the process
    that forked this one before the fork counts (this one used almost none)."""
    time.sleep(IDLE_S)
    return slowdown()


def _read_in_a_child(fn) -> tuple[float, float]:
    """``fn()`` run in a child forked under a deadline once this process used some CPU
    under it, and the most the slowdown can be by then if that CPU counts: the time since
    the deadline began over it."""
    since = time.monotonic()
    with until(600):
        began = cpu_s()
        while cpu_s() < began + 0.05:
            pass
        before = cpu_s()
        value = in_background(fn).result()
    return value, (time.monotonic() - since) / (before - began)


def test_a_child_counts_its_parents_cpu_under_the_deadline():
    child, most = _read_in_a_child(_idle_slowdown)
    assert 1.0 < child <= most


def _grandchilds_slowdown() -> float:
    return in_background(_idle_slowdown).result()


def test_a_grandchild_counts_the_cpu_of_both_its_parents():
    """A child forked by a forked child (a forked lowering's dealt passes) counts the
    compile's CPU before the first fork too, not only its own parent's."""
    grandchild, most = _read_in_a_child(_grandchilds_slowdown)
    assert 1.0 < grandchild <= most


def test_no_proc_entry_counts_nothing():
    """A child said forked that /proc does not show (reaped between the listing and the
    reading, or no /proc) is counted as nothing, without an error."""
    gone = 2 ** 22 + 1  # above any pid_max: no such process
    forked(gone)
    try:
        assert slowdown() >= 1.0
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
