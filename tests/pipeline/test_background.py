"""A forked computation gives what the call would: its value, its exception, or — when the
child leaves no result — the value computed in the caller."""

from __future__ import annotations

import os
import signal
import time

import pytest

from te_ccl.background import in_background, streamed, told
from te_ccl.errors import VerificationError

PARENT = os.getpid()


def _pid_and(x: int) -> tuple[int, int]:
    return os.getpid(), x * 2


def _fails(message: str) -> None:
    raise VerificationError(message)


def _dies_in_a_child(x: int) -> int:
    if os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return x + 1


def _unpicklable() -> object:
    return lambda: None if os.getpid() != PARENT else "made here"


def test_the_value_comes_from_another_process():
    pid, value = in_background(_pid_and, 21).result()
    assert value == 42 and pid != os.getpid()


def test_an_exception_in_the_child_is_raised_by_result():
    with pytest.raises(VerificationError, match="bad schedule"):
        in_background(_fails, "bad schedule").result()


def test_a_child_that_dies_is_replaced_by_the_call_itself():
    assert in_background(_dies_in_a_child, 1).result() == 2


def test_a_result_that_cannot_be_sent_is_computed_here():
    assert callable(in_background(_unpicklable).result())


def _sleep_after_saying_who(path: str) -> None:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)


def test_cancel_stops_and_reaps_the_child(tmp_path):
    said = tmp_path / "pid"
    job = in_background(_sleep_after_saying_who, str(said))
    while not said.exists() or not said.read_text():
        time.sleep(0.01)
    job.cancel()
    with pytest.raises(ProcessLookupError):
        os.kill(int(said.read_text()), 0)


def _counts_to(tell, n: int) -> tuple[int, int]:
    for k in range(n):
        tell(k)
    return os.getpid(), n


def test_told_passes_the_childs_messages_in_order_then_its_value():
    heard: list[int] = []
    pid, value = told(_counts_to, heard.append, 3)
    assert heard == [0, 1, 2] and value == 3 and pid != os.getpid()


def _says_then_sleeps(tell) -> None:
    tell(os.getpid())
    time.sleep(600)


def test_a_listener_that_fails_stops_the_child():
    pids: list[int] = []

    def fails(pid: int) -> None:
        pids.append(pid)
        raise VerificationError("not listening")

    with pytest.raises(VerificationError, match="not listening"):
        told(_says_then_sleeps, fails)
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork: nothing runs apart")
def test_a_low_priority_child_runs_at_nice_19_and_the_caller_keeps_its_own():
    before = os.nice(0)
    assert in_background(os.nice, 0, low_priority=True).result() == 19
    assert in_background(os.nice, 0).result() == before
    assert os.nice(0) == before


def _may_lower_its_niceness() -> bool:
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except PermissionError:
        return False
    return True


def _niceness_when_told(started: str, go: str) -> int:
    """Say it runs (at its priority already), wait for ``go``, return its niceness."""
    open(started, "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
    return os.nice(0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork: nothing runs apart")
def test_a_hurried_low_priority_child_runs_at_the_callers_priority(tmp_path):
    started, go = tmp_path / "started", tmp_path / "go"
    job = in_background(_niceness_when_told, str(started), str(go), low_priority=True)
    while not started.exists():
        time.sleep(0.01)
    job.hurry()
    go.touch()
    niceness = job.result()
    if not in_background(_may_lower_its_niceness, low_priority=True).result():
        pytest.skip("this system lets no process lower its niceness")
    assert niceness == os.nice(0)


def test_streamed_items_reach_a_forked_consumer_in_order():
    parent = os.getpid()
    made, (pid, items) = streamed(lambda put: [put(i) for i in range(5)] and "made",
                                  lambda items: (os.getpid(), list(items)))
    assert made == "made" and items == [0, 1, 2, 3, 4] and pid != parent


def test_streamed_consumer_without_a_result_runs_here_on_the_items_kept():
    parent = os.getpid()

    def consume(items):
        if os.getpid() != parent:
            os._exit(0)  # dies without a result
        return sum(items)

    assert streamed(lambda put: [put(i) for i in range(5)], consume)[1] == 10


def test_streamed_raises_what_either_side_raised():
    def bad_consumer(items):
        list(items)
        raise ValueError("consumer")

    with pytest.raises(ValueError, match="consumer"):
        streamed(lambda put: [put(i) for i in range(3)], bad_consumer)

    def bad_producer(put):
        put(1)
        raise KeyError("producer")

    with pytest.raises(KeyError, match="producer"):
        streamed(bad_producer, list)


def _sleeps_in_a_child(marker: str) -> None:
    if os.getpid() != PARENT:  # a child whose stage never looks at the clock
        time.sleep(60)
        open(marker, "w").close()


def test_a_child_past_the_deadline_is_stopped_and_the_wait_ends(tmp_path):
    """The caller waits for a child no longer than its deadline and a grace: the child is
    stopped and the caller hears the deadline, not the computation done again here."""
    from te_ccl.deadline import TimeLimitReached, until

    marker = tmp_path / "finished"
    job = in_background(_sleeps_in_a_child, str(marker))
    with until(0.0), pytest.raises(TimeLimitReached, match="waiting for a process it forked"):
        job.result()
    assert not marker.exists()


def test_a_child_stopped_past_the_deadline_is_named_by_the_stage_it_was_started_for(tmp_path):
    from te_ccl.deadline import TimeLimitReached, until

    job = in_background(_sleeps_in_a_child, str(tmp_path / "finished"),
                        doing="checking the schedule")
    with until(0.0), pytest.raises(TimeLimitReached, match="checking the schedule"):
        job.result()


def _tells_then_sleeps(tell, marker: str) -> None:
    tell("lowering: channels")
    _sleeps_in_a_child(marker)


def test_a_told_child_stopped_past_the_deadline_is_named_by_its_last_message(tmp_path):
    from te_ccl.deadline import TimeLimitReached, until

    heard: list[str] = []
    with until(0.0), pytest.raises(TimeLimitReached, match="while lowering: channels$"):
        told(_tells_then_sleeps, heard.append, str(tmp_path / "finished"))
    assert heard == ["lowering: channels"]
