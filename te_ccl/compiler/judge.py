"""The judge of a candidate: the only place that knows how a schedule is timed.

Candidates (chunkings, the flow schedule against the templates) are judged, and the
result is reported, by replaying the file each lowers to, the program the runtime runs:
the MSCCL XML (:func:`xml_replay`), or for ``--format mscclpp`` the MSCCL++ plan
(:func:`plan_replay`: an NVLS sum goes to the reading GPU and back up to be multicast,
which the schedule's own replay does not model). Above :data:`XML_REPLAY_LIMIT`
transfers lowering every candidate would cost more than the compile's budget, so the
schedule's own replay screens them (bracketed by :func:`_prediction_bounds_replay` and
:func:`_busiest_link`) and only the finalists, those it puts within
:data:`FINALIST_MARGIN` of the best file so far, are lowered and judged by their file
while the deadline allows (``SHARES.finalist``): the schedule replay misjudges what
the lowering does (ndv2x4 AllReduce 1 GB: the packed trees replay 1.4% faster than the
hierarchical template as schedules, and their XML 12% slower).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import te_ccl.lower.msccl as msccl_lowering
import te_ccl.simulate.replay as schedule_replay
import te_ccl.verify.msccl.reader as xml_reader
import te_ccl.verify.msccl.verify as xml_verifier
from te_ccl.background import WORTH_FORKING, Background, in_background, workers
from te_ccl.collective.model import Collective
from te_ccl.compiler.options import CompileOptions
from te_ccl.compiler.solve import Judge
from te_ccl.deadline import SHARES, TimeLimitReached, left, slowdown
from te_ccl.errors import RuntimeLimitError, TecclError
from te_ccl.lower.msccl.merge import MODES as MERGE_MODES
from te_ccl.lower.msccl.parallel import quiet
from te_ccl.lower.mscclpp import lower_to_mscclpp
from te_ccl.schedule import Schedule
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.simulate.plan import plan_finish_s

if TYPE_CHECKING:
    from te_ccl.verify.msccl.model import Algo

__all__ = ["Timer", "Timing", "check_s", "xml_replay", "plan_replay", "SIM_LIMIT", "XML_REPLAY_LIMIT",
           "PARALLEL_FROM", "FINALIST_MARGIN"]

LOWER_S_PER_TRANSFER = 1e-4  # lowering's CPU pace until the compile has timed its own:
#                               65k transfers take 5-15 s (meshes faster than tori); by the
#                               clock, times the machine's slowdown
CHECK_S_PER_TRANSFER = 2e-6  # the schedule checker's CPU per transfer, above its measured
#                              pace: too low, a checker the deadline cannot stop is started
#                              (it reads every transfer first); too high, a file that had
#                              time for it is written unchecked
VERIFY_SHARE = 0.4  # verifying a file takes about this share of what lowering it did
REPLAY_SHARE = 0.2  # and replaying it (beside the verifier, from PARALLEL_FROM transfers) this
PACE_MIN_TRANSFERS = 1000  # smaller lowerings time their fixed costs, not their pace
SIM_LIMIT = 100_000  # transfers: beyond, a schedule is timed by its prediction
PARALLEL_FROM = WORTH_FORKING  # transfers: from here, the checker and the written file's
#                                replay run in a forked process beside the lowering and the
#                                verifier (if there is a second core)
XML_REPLAY_LIMIT = 20_000  # transfers: beyond, lowering and replaying every candidate's XML
#                            costs more than the compile's budget; the schedule replay
#                            screens and the finalists' files judge
FINALIST_MARGIN = 0.05  # beyond XML_REPLAY_LIMIT, a candidate whose schedule replay is
#                         within this of the best file's replay so far (or below) has its
#                         file judged: a lowering gains up to a few percent (dgx-a100
#                         Broadcast 64 MB: the XML replays 2.8% faster than the schedule)
MERGE_UP_TO = 10_000  # transfers: up to here a file whose steps carry several chunks is
#                      lowered (in each mode), verified and replayed too where one step a
#                      chunk does not fit; beyond, those lowerings take the time the
#                      other candidates need to be built and judged


@dataclass(frozen=True)
class Timing:
    """What a schedule takes, by each measure (seconds).

    ``xml_s``: the replay of its lowered MSCCL XML (:func:`te_ccl.simulate.msccl.simulate_msccl`),
    None above :data:`XML_REPLAY_LIMIT` transfers unless it was a finalist, or when it
    does not lower
    (``unlowerable`` says why; ``refittable``: over a runtime limit with sub-chunks that
    :func:`render_fitting` can solve again fewer); ``plan_s`` likewise of its MSCCL++
    plan (:func:`plan_replay`); ``schedule_s``: the replay of the schedule itself, None
    above :data:`SIM_LIMIT` transfers; ``predicted_s``: the epoch model's.
    """

    predicted_s: float
    schedule_s: float | None = None
    xml_s: float | None = None
    unlowerable: str | None = None
    refittable: bool = False
    unreplayed: str | None = None  # why the written file was not replayed (the time limit)
    plan_s: float | None = None
    behind_s: float | None = None  # timed without its file: where it stands (Timer._time)

    @property
    def file_s(self) -> float | None:
        """The replay of the file lowered: the plan's, else the XML's."""
        return self.plan_s if self.plan_s is not None else self.xml_s

    @property
    def finish_s(self) -> float:
        """The best measure there is: the file's replay, else the schedule's, else the
        prediction."""
        for t in (self.file_s, self.schedule_s):
            if t is not None:
                return t
        return self.predicted_s

    @property
    def measured_by(self) -> str:
        if self.plan_s is not None:
            return "plan replay"
        if self.xml_s is not None:
            return "xml replay"
        return "schedule replay" if self.schedule_s is not None else "epoch model"


def _schedule_replay(schedule: Schedule) -> float | None:
    """The schedule's α-β replay with contention, None above :data:`SIM_LIMIT` transfers."""
    if len(schedule.transfers) > SIM_LIMIT:
        return None
    return schedule_replay.replay_finish(schedule)


def check_s(transfers: int) -> float:
    """Seconds by the clock the schedule checker takes on ``transfers`` transfers, by
    estimate: :data:`CHECK_S_PER_TRANSFER` CPU seconds each, times the machine's
    :func:`~te_ccl.deadline.slowdown` (it reads them all before it first looks at the
    deadline, so a compile asks before starting it)."""
    return transfers * CHECK_S_PER_TRANSFER * slowdown()


def xml_replay(schedule: Schedule, data: bytes, algo: Algo | None = None) -> float:
    """The finish time of ``data``, the MSCCL XML lowered from ``schedule``, replayed on
    the schedule's topology as the runtime runs it (``algo``: ``data`` as the verifier
    read it, if it did)."""
    c = schedule.collective
    return simulate_msccl(algo or xml_reader.read_msccl(data.decode()), schedule.topology,
                          c.size_bytes, ranks=c.ranks).finish_time_s


def plan_replay(schedule: Schedule, data: bytes, *, checked: bool = False) -> float:
    """The finish time of ``data``, the MSCCL++ plan lowered from ``schedule``, replayed on
    the schedule's topology as the executor runs it (:mod:`te_ccl.simulate.plan`, which
    has the plan checker accept it first unless it did already: ``checked``)."""
    import json

    return plan_finish_s(json.loads(data), schedule.topology, schedule.collective.size_bytes,
                         checked=checked)


def _prediction_bounds_replay(schedule: Schedule) -> float | None:
    """The prediction when it bounds the schedule replay from above (te_ccl.simulate.replay:
    no link starts two chunks in one epoch, or no link has latency), else None."""
    starts = {(t.src, t.dst, t.start_epoch) for t in schedule.transfers}
    if len(starts) == len(schedule.transfers) or not any(
            x.latency_s for x in schedule.topology.links):
        return schedule.finish_time_s
    return None


def _busiest_link(schedule: Schedule) -> float:
    """A lower bound of the schedule replay: a link carries one chunk at a time, the last
    arriving ``α`` after it leaves (te_ccl.simulate.engine)."""
    load = Counter((t.src, t.dst) for t in schedule.transfers)
    links = (schedule.topology.link(*key) for key in load)
    return max((n * schedule.chunk_bytes / x.bandwidth_Bps + x.latency_s
                for n, x in zip(load.values(), links, strict=True)), default=0.0)


def lower_file(schedule: Schedule, options: CompileOptions,
               progress: Callable[[str], None] | None = None) -> bytes:
    """``schedule`` lowered to the file ``options`` asks for: an MSCCL++ plan for
    ``mscclpp``, else MSCCL XML within ``options.runtime``'s limits, told to ``progress``
    (not verified yet)."""
    return _lower_timed(schedule, options, progress)[0]


def _lower_timed(schedule: Schedule, options: CompileOptions,
                 progress: Callable[[str], None] | None) -> tuple[bytes, float | None]:
    """:func:`lower_file`, with the XML replay of the file where choosing it took one
    (:func:`_merged_if_faster`), else None."""
    o = options
    if o.fmt == "mscclpp":
        name = o.name or f"{schedule.topology.name}-{schedule.collective.kind.value}"
        return lower_to_mscclpp(schedule, name=name, min_bytes=o.min_bytes,
                                max_bytes=o.max_bytes), None
    return _merged_if_faster(schedule, partial(
        msccl_lowering.lower_to_msccl, schedule, name=o.name, min_bytes=o.min_bytes,
        max_bytes=o.max_bytes, runtime=o.runtime, progress=progress or quiet), o)


def _merged_if_faster(schedule: Schedule, lower: Callable[..., bytes],
                      options: CompileOptions) -> tuple[bytes, float | None]:
    """The XML ``lower`` writes, or, up to :data:`MERGE_UP_TO` transfers where that file
    exceeds the runtime's limits or gives up the schedule's timing to fit them (its
    notes say so), one whose steps carry several chunks (in each mode of
    :data:`~te_ccl.lower.msccl.merge.MODES`) that passes the verifier and replays
    fastest. Elsewhere a merged file has not replayed faster, and lowering it costs the
    search its time; a schedule cut into sub-chunks that does not fit is solved again
    with fewer, which keeps its timing where merging its pieces moves them. With the file,
    its replay where a merged one was replayed against it (None where none was), so the
    judge does not replay it again."""
    refused: RuntimeLimitError | None = None
    notes: list[str] = []
    try:
        best: bytes | None = lower(notes=notes)
    except RuntimeLimitError as e:
        best, refused = None, e
    if len(schedule.transfers) > MERGE_UP_TO or (best is not None and not notes) \
            or schedule.info.subchunks > 1:  # solved again with fewer (render_fitting)
        if best is None:
            raise refused
        return best, None
    best_s: float | None = None  # the replay of best, once another file is up against it
    for mode in MERGE_MODES:
        try:
            merged = lower(merge=mode)
        except TimeLimitReached:
            raise  # the compile's time is up: not a property of the merged file
        except TecclError:  # the file of one step per chunk stands (or its refusal)
            continue
        if merged == best or not xml_verifier.verify_msccl(
                merged.decode(), limits=options.runtime).valid:
            continue
        try:  # the replay holds a step of cnt > 1 to one send a connection: it may hang
            seconds = xml_replay(schedule, merged)
        except TimeLimitReached:
            raise
        except TecclError:
            continue
        if best is not None and best_s is None:
            best_s = xml_replay(schedule, best)
        if best_s is None or seconds < best_s:
            best, best_s = merged, seconds
    if best is None:
        raise refused
    return best, best_s


class Timer:
    """Times each schedule once (``solve`` judges its candidates, the chunking loop the
    winner again, the summary and the benchmark report it): by the replay of its
    lowered XML when ``xml`` (of its MSCCL++ plan when ``options.fmt`` is ``mscclpp``)
    and it has at most :data:`XML_REPLAY_LIMIT` transfers or is a finalist (:meth:`_finalist`),
    else by the schedule replay. A schedule that does not lower is judged infinitely slow, so
    ``auto`` keeps a candidate that does; one whose sub-chunks overflow a runtime limit
    stands at its schedule replay, since :func:`render_fitting` solves it again with
    fewer sub-chunks.

    A time is remembered by the schedule's transfers tuple (``with_info`` keeps it),
    collective (the buffer mode changes the XML) and sub-chunking.
    """

    def __init__(self, *, xml: bool = True, options: CompileOptions | None = None) -> None:
        options = options or CompileOptions()
        self.options = options  # the file's name and size range, so a judged XML can be written
        self.plan = options.fmt == "mscclpp"  # the file judged is an MSCCL++ plan
        self.xml = xml and not self.plan
        self._seen: dict[tuple[int, Collective, int], tuple[tuple, Timing]] = {}
        self._lowered: dict[tuple[int, Collective, int], tuple[Schedule, bytes]] = {}
        self._pace: float | None = None  # the slowest lowering timed, per transfer
        self._read: tuple[bytes, Algo] | None = None  # the last file the verifier read
        # the last file lowered whose replay the merge pass took, by its schedule's key
        self._merge_replay: tuple[tuple[int, Collective, int], bytes, float] | None = None
        self._replay: tuple[bytes, Background[float]] | None = None  # a file's, under way
        # the best file replay so far of each collective (whatever its chunking), and the
        # key of the schedule above XML_REPLAY_LIMIT whose file is kept for writing
        self._best_file: dict[Collective, tuple[float, tuple[int, Collective, int]]] = {}
        # the file kept for writing: its schedule's transfers, key (:meth:`_key`) and replay
        self._kept: tuple[tuple, tuple[int, Collective, int], float | None] | None = None
        lowered = "MSCCL++ plan" if self.plan else "XML" if self.xml else None
        what = (f"replay of the lowered {lowered}, or of the schedule for one of over "
                f"{XML_REPLAY_LIMIT} transfers far from the best file" if lowered
                else "schedule replay")
        self.judge = Judge(what, self._time, self._at_most, self._at_least, self.write_s)

    def write_s(self, schedule: Schedule) -> float:
        """About how long writing ``schedule`` takes: lowering it (done already if it
        was judged by its XML), verifying it (:data:`VERIFY_SHARE` of the lowering) and,
        above :data:`XML_REPLAY_LIMIT` transfers, replaying the written file
        (:data:`REPLAY_SHARE`), at the pace timed (:attr:`pace`); nothing for the file
        kept (:meth:`kept`), whose passes are done: the search keeps no time for them."""
        if self._kept is not None and schedule.transfers is self._kept[0] \
                and self._key(schedule) == self._kept[1]:  # another buffer mode is another file
            return 0.0
        lowered = self._lowered.get(self._key(schedule))
        return self.write_n(len(schedule.transfers),
                            lowered is not None and lowered[0].transfers is schedule.transfers)

    def write_n(self, transfers: int, lowered: bool) -> float:
        """:meth:`write_s` of a schedule of ``transfers`` (``lowered`` already or not)."""
        if not self.files:
            return 0.0
        passes = (0 if lowered else 1) + VERIFY_SHARE + (
            REPLAY_SHARE if transfers > XML_REPLAY_LIMIT else 0)
        return self.pace * transfers * passes

    @property
    def pace(self) -> float:
        """Seconds per transfer, by the clock, of the slowest lowering timed (of at least
        :data:`PACE_MIN_TRANSFERS`), else :data:`LOWER_S_PER_TRANSFER` (CPU) times the
        machine's :func:`~te_ccl.deadline.slowdown`, as the time it is compared with is."""
        return self._pace or LOWER_S_PER_TRANSFER * slowdown()

    def kept(self, schedule: Schedule, finish_s: float | None) -> None:
        """``schedule``'s file is lowered, verified and kept for writing, and its replay
        finishes in ``finish_s`` (None: it was not replayed): a finalist must beat it too
        (a first file is timed when written, not by judging it, so it is not among the
        best files judged)."""
        self._kept = (schedule.transfers, self._key(schedule), finish_s)

    def paced(self, transfers: int, seconds: float) -> None:
        """A lowering of ``transfers`` took ``seconds``."""
        if transfers >= PACE_MIN_TRANSFERS:
            self._pace = max(self._pace or 0.0, seconds / transfers)

    def lower(self, schedule: Schedule, options: CompileOptions,
              progress: Callable[[str], None] | None = None) -> bytes:
        """:func:`lower_file`, its time taken into the pace (:meth:`paced`)."""
        start = time.monotonic()
        data, replay_s = _lower_timed(schedule, options, progress)
        self.paced(len(schedule.transfers), time.monotonic() - start)
        self._merge_replay = None if replay_s is None else (self._key(schedule), data,
                                                            replay_s)
        return data

    def _xml_s(self, schedule: Schedule, data: bytes, algo: Algo | None = None) -> float:
        """:func:`xml_replay`, unless the merge pass replayed ``data`` already."""
        known = self._merge_replay
        if known is not None and known[1] is data and known[0] == self._key(schedule):
            return known[2]
        return xml_replay(schedule, data, algo)

    @property
    def files(self) -> bool:
        """Whether schedules are judged by a file they lower to (XML or plan)."""
        return self.xml or self.plan

    def _by_xml(self, schedule: Schedule) -> bool:
        return self.files and len(schedule.transfers) <= XML_REPLAY_LIMIT

    def _finalist(self, schedule: Schedule, timing: Timing) -> bool:
        """Above :data:`XML_REPLAY_LIMIT` transfers: is ``schedule``, timed ``timing`` by its
        replay, worth its file's (within :data:`FINALIST_MARGIN` of the best file so far,
        or the first; the file kept counts, :meth:`kept`), and can that be had in
        ``SHARES.finalist`` of the time left, or, where its replay beats the best file,
        wherever it could still be written? Such a
        candidate would be written if it won, so its file is what the judge must time:
        judged by the best file's margin instead, it would lose to that file at a time no
        file has."""
        n = len(schedule.transfers)
        if not self.files:
            return False
        best = self._fastest_file_s(schedule.collective)
        if best is not None and timing.finish_s > best * (1 + FINALIST_MARGIN):
            return False
        if best is not None and timing.finish_s < best:
            return self.write_n(n, lowered=False) <= left()
        return self.pace * n * (1 + REPLAY_SHARE) <= SHARES.finalist * left()

    def _fastest_file_s(self, collective: Collective) -> float | None:
        """The fastest file replay of ``collective`` (whatever its chunking): the best
        judged, or the file kept (:meth:`kept`) where it was replayed; None before both."""
        same = _same_collective(collective)
        times = [self._best_file[same][0]] if same in self._best_file else []
        if self._kept is not None and self._kept[2] is not None \
                and _same_collective(self._kept[1][1]) == same:
            times.append(self._kept[2])
        return min(times, default=None)

    def _filed(self, schedule: Schedule, data: bytes, seconds: float) -> None:
        """``schedule``'s file, ``data``, replays in ``seconds``: kept for writing while it
        is the best of its collective (above :data:`XML_REPLAY_LIMIT` transfers only the
        best: a 1024-GPU file is hundreds of MB)."""
        key, same = self._key(schedule), _same_collective(schedule.collective)
        best = self._best_file.get(same)
        if best is None or seconds < best[0]:
            old = self._lowered.get(best[1]) if best is not None else None
            if old is not None and len(old[0].transfers) > XML_REPLAY_LIMIT:
                del self._lowered[best[1]]
            self._best_file[same] = (seconds, key)
        elif len(schedule.transfers) > XML_REPLAY_LIMIT:
            return
        self._lowered[key] = (schedule, data)

    @staticmethod
    def _key(schedule: Schedule) -> tuple[int, Collective, int]:
        return (id(schedule.transfers), schedule.collective, schedule.info.subchunks)

    def timing(self, schedule: Schedule) -> Timing:
        key = self._key(schedule)
        hit = self._seen.get(key)
        if hit is None or hit[0] is not schedule.transfers:
            hit = self._seen[key] = (schedule.transfers, self._measure(schedule))
        return hit[1]

    def lowered(self, schedule: Schedule, options: CompileOptions) -> bytes | None:
        """The XML lowered to judge ``schedule``, if it was and is the file ``options`` asks for."""
        hit = self._lowered.get(self._key(schedule))
        same = (options.name, options.min_bytes, options.max_bytes, options.runtime) == (
            self.options.name, self.options.min_bytes, self.options.max_bytes,
            self.options.runtime)
        return (hit[1] if same and hit is not None and hit[0].transfers is schedule.transfers
                else None)

    def measured(self, collective: Collective) -> list[tuple[float, Schedule, bytes]]:
        """The files judging lowered and replayed for ``collective`` (any chunking) whose
        bytes are kept, fastest first, with their replays: not verified yet, but what
        the compile falls back on when the file it meant to write cannot be, rather than
        on a slower one (above :data:`XML_REPLAY_LIMIT` transfers only the fastest is kept)."""
        same, found = _same_collective(collective), []
        for key, (schedule, data) in self._lowered.items():
            seen = self._seen.get(key)
            if _same_collective(schedule.collective) == same and seen is not None \
                    and seen[0] is schedule.transfers and seen[1].file_s is not None:
                found.append((seen[1].file_s, schedule, data))
        return sorted(found, key=lambda f: f[0])

    def refused(self, schedule: Schedule) -> None:
        """``schedule``'s file failed verification: it is not one to fall back on."""
        self._lowered.pop(self._key(schedule), None)

    def replayed(self, schedule: Schedule, data: bytes, xml_s: float) -> None:
        """``schedule`` is timed by ``data``, a file of its routes made otherwise than by
        lowering it (the previous file spliced, :mod:`te_ccl.compiler.splice`), whose
        replay took ``xml_s``: it is neither lowered nor replayed again."""
        self._seen[self._key(schedule)] = (schedule.transfers,
                                           Timing(schedule.finish_time_s, xml_s=xml_s))

    def verified(self, data: bytes, algo: Algo) -> None:
        """``data`` passed the verifier, which read it as ``algo``: the replay of the
        written file reads no second copy (a 1024-GPU file is hundreds of MB)."""
        self._read = (data, algo)

    @contextmanager
    def replaying(self, schedule: Schedule, data: bytes
                  ) -> Iterator[Callable[[Algo], None] | None]:
        """While the body verifies ``data``, the XML to be written for ``schedule``, replay
        it in a forked process (:mod:`te_ccl.background`) if :meth:`replay_written` will
        need it and it has :data:`PARALLEL_FROM` transfers or more; dropped if the body
        fails. The body gets the function that starts the replay with ``data`` as the
        verifier read it (None where there is none to start): the replay reads no
        second copy. It runs at the lowest priority: at scale the verifier itself keeps
        both cores busy (its data run is forked), and the replay takes what it leaves."""
        if len(schedule.transfers) < PARALLEL_FROM or workers() < 2 or not self.xml \
                or self._timed_by_xml(schedule):
            yield None
            return
        if self._replay is not None:  # one not taken up by replay_written is not wanted
            self._replay[1].cancel()
            self._replay = None
        job: Background[float] | None = None

        def start(algo: Algo) -> None:
            nonlocal job
            job = in_background(xml_replay, schedule, data, algo, low_priority=True)

        try:
            yield start
        except BaseException:
            if job is not None:
                job.cancel()
            raise
        if job is not None:
            self._replay = (data, job)

    def _timed_by_xml(self, schedule: Schedule) -> bool:
        hit = self._seen.get(self._key(schedule))
        return hit is not None and hit[0] is schedule.transfers and hit[1].file_s is not None

    def replay_written(self, schedule: Schedule, data: bytes, *,
                       schedule_replay: bool = True) -> None:
        """Time ``schedule`` by ``data``, the XML written for it, where judging did not (over
        :data:`XML_REPLAY_LIMIT` transfers, or not judged): the compile reports the file's
        replay. Past the compile's deadline the file stays written and the schedule
        replay stands. A schedule not judged is replayed too unless not
        ``schedule_replay`` (a first file's: that would take about as long again)."""
        read, self._read = self._read, None  # a 1024-GPU file's model is not kept past here
        started, self._replay = self._replay, None
        hit = self._seen.get(self._key(schedule))
        if hit is not None and hit[0] is schedule.transfers:
            timing = hit[1]
        else:
            try:
                timing = Timing(schedule.finish_time_s,
                                _schedule_replay(schedule) if schedule_replay else None)
            except TimeLimitReached as e:  # the file stays written, timed by the prediction
                timing = Timing(schedule.finish_time_s, unreplayed=str(e))
                self._seen[self._key(schedule)] = (schedule.transfers, timing)
                return
        if timing.file_s is not None or not self.files:
            return
        algo = read[1] if read is not None and read[0] is data else None
        try:
            if self.plan:
                timing = replace(timing, plan_s=plan_replay(schedule, data, checked=True))
            elif started is not None and started[0] is data:
                started[1].hurry()
                timing = replace(timing, xml_s=started[1].result())
            else:
                timing = replace(timing, xml_s=self._xml_s(schedule, data, algo))
        except TimeLimitReached as e:
            timing = replace(timing, unreplayed=str(e))
        self._seen[self._key(schedule)] = (schedule.transfers, timing)

    def file_timing(self, schedule: Schedule) -> Timing:
        """:meth:`timing`, with the XML lowered and replayed at any number of transfers
        (what a benchmark reports of the file it would write)."""
        timing = self.timing(schedule)
        if timing.file_s is None and timing.unlowerable is None and self.files:
            timing, data = self._lower(schedule, timing)
            self._seen[self._key(schedule)] = (schedule.transfers, timing)
            if data is not None:
                self.replay_written(schedule, data)
        return self.timing(schedule)

    def _measure(self, schedule: Schedule) -> Timing:
        timing = Timing(schedule.finish_time_s, _schedule_replay(schedule))
        if not self._by_xml(schedule) and not self._finalist(schedule, timing):
            return self._behind(schedule, timing)
        timing, data = self._lower(schedule, timing)
        if data is None:
            return self._behind(schedule, timing)
        if self.plan:
            timing = replace(timing, plan_s=plan_replay(schedule, data))
        else:
            timing = replace(timing, xml_s=self._xml_s(schedule, data))
        self._filed(schedule, data, timing.file_s)
        return timing

    def _lower(self, schedule: Schedule, timing: Timing) -> tuple[Timing, bytes | None]:
        """The file of ``schedule`` (:func:`lower_file`), or None with ``timing`` saying
        why it does not lower."""
        try:
            return timing, self.lower(schedule, self.options)
        except TimeLimitReached:
            raise  # the compile's time is up: not a property of the schedule
        except RuntimeLimitError as e:
            return replace(timing, unlowerable=str(e),
                           refittable=schedule.info.subchunks > 1), None
        except TecclError as e:
            return replace(timing, unlowerable=str(e)), None

    def _time(self, schedule: Schedule) -> float:
        """The judged time; a schedule not timed by its file (no time was left to lower
        it) where another of its collective was when it was timed, at least
        :data:`FINALIST_MARGIN` behind that file (:meth:`_behind`): a choice is made on
        measured files, and one that could not be lowered in time is not likely to be
        written in time either: winning by its schedule replay, it would displace a
        measured file and leave the compile writing an earlier, slower one."""
        timing = self.timing(schedule)
        if timing.unlowerable is not None and not timing.refittable:
            return math.inf
        if timing.file_s is None and timing.behind_s is not None:
            return max(timing.finish_s, timing.behind_s)
        return timing.finish_s

    def _behind(self, schedule: Schedule, timing: Timing) -> Timing:
        """``timing``, of ``schedule`` timed without its file, with where it stands
        (:meth:`_time`): :data:`FINALIST_MARGIN` behind the best file of its collective
        judged by then, if any. Fixed when it is timed, as its verdict is: a file judged
        later would put the race's winner behind it when the search asks again, which
        then drops it for a slower file."""
        best = self._best_file.get(_same_collective(schedule.collective))
        # one to refit keeps its replay: it is solved again with fewer sub-chunks to write;
        # not for a plan, whose NVLS sums the schedule replay keeps in the switch
        # (hgx-h100x2 AllReduce 1 GB: 1.02x the bound by it, its plan refitted 2.16x)
        if best is None or not self.files or (timing.unlowerable is not None
                                              and not self.plan):
            return timing
        return replace(timing, behind_s=best[0] * (1 + FINALIST_MARGIN))

    def _at_most(self, schedule: Schedule) -> float | None:
        if self._by_xml(schedule) or self._timed_by_xml(schedule):
            return None  # the prediction bounds the schedule's replay, not its file's
        return _prediction_bounds_replay(schedule)

    def _at_least(self, schedule: Schedule) -> float | None:
        return None if self._by_xml(schedule) else _busiest_link(schedule)


def _same_collective(collective: Collective) -> Collective:
    """``collective`` whatever its chunking: the candidates of one compile compete
    across chunkings."""
    return replace(collective, chunks_per_rank=1)
