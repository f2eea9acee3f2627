"""Compile again from a previous schedule when the network changed (``--from FILE``).

A link went down or got slower: the previous MSCCL file, read by the verifier's reader,
still says how each chunk travelled: for AllGather and Broadcast, which GPU sent which
chunk to which GPU (a tree per chunk). Those trees are routed again on the new topology
(the direct link where it is still there, else the fastest path, as a template's are)
and timed epoch by epoch (:func:`te_ccl.baselines.plan.assemble`), at the fewest pieces
per rank (a divisor of the previous file's chunks times sub-chunks) that replay within
:data:`QUALITY_GAP` of the lower bound, else at the file's: that schedule is the
compile's first file, and where its file replays within :data:`WARM_GAP` of the lower
bound it stands:
the previous compile raced the flow model and the templates already. Where a method of the
scale backend fits, that backend repairs instead, at the previous file's sub-chunks (no
race of the portfolio). Where neither applies (reductions, relays through scratch
buffers, routes that land farther) the compile goes on as without a previous file.

Where links are gone and nothing else changed, the previous file is first spliced
(:mod:`te_ccl.compiler.splice`): its steps kept, the chunks that crossed a lost link
received from another neighbour, no lowering; verified and replayed in full, that file
stands where it replays within :data:`QUALITY_GAP` of the lower bound (so within that
of any compile from scratch), and the compile is a few passes over one file.

The previous file must be for the same collective (``coll``, buffer mode) on the same
number of ranks; a file for another one is bad input. With GPUs gone (``teccl topo edit
--without-gpu``) the ranks change: a file of every GPU of a topology that still loads
by the name its provenance comment gives (a shipped one, or ``NAME.yaml``) is
matched by GPU name; the chunks of a GPU gone are dropped, and what it relayed is sent
by the GPU that sent it there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import te_ccl.verify.msccl.reader as xml_reader
import te_ccl.verify.msccl.verify as xml_verifier
from te_ccl.backends.base import SolveParams
from te_ccl.backends.select import strategy_for
from te_ccl.background import WORTH_FORKING, in_background, workers
from te_ccl.baselines.plan import BaselineError, ChunkPlan, assemble
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler.incumbent import Incumbent, describe
from te_ccl.compiler.options import CompileOptions
from te_ccl.compiler.splice import QUEUED, SPLICING, WAYS, splice, step_times
from te_ccl.errors import SpecError, TecclError, VerificationError
from te_ccl.lower.msccl.to_xml import program_to_xml
from te_ccl.schedule import Schedule
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.simulate.replay import replay_finish
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.layout import Layout
from te_ccl.verify.msccl.model import Algo
from te_ccl.verify.msccl.values import expand
from te_ccl.verify.schedule_check import check_schedule

if TYPE_CHECKING:
    from te_ccl.compiler.judge import Timer

__all__ = ["Previous", "first_candidates", "offer_spliced", "read_previous", "repair",
           "warm_schedule", "WARM"]

WARM = "previous file"  # the source name of the schedule built from it
ROUTES = "previous-routes"  # the name of the template its routes make
SPLICED = "previous-spliced"  # the name of the routes of the file spliced
QUALITY_GAP = 0.02  # a coarser cut of its routes is taken within this of the lower bound
NEAR_GAP = 0.05  # a splice farther than this from the lower bound tries no other weight
WARM_GAP = 0.1  # its routes stand when the file they make replays within this of the
#                 lower bound; else the portfolio searches on from them
BESIDE_FROM = WORTH_FORKING  # tree edges: from here a splice's schedule is built in a forked
#                              process while its file is verified (:func:`_built_beside`)
_TREES = (CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST)  # kinds whose trees are read


Tree = tuple[int, int, tuple[tuple[int, int], ...]]  # chunk, owner, (receiver, sender)…


@dataclass(frozen=True)
class Previous:
    """A previous file checked against the collective: its pieces per rank and, where
    they can be read, each chunk's tree in the collective's rank positions (None: ``why``
    says why not)."""

    path: str
    pieces: int
    trees: tuple[Tree, ...] | None
    why: str = ""
    algo: Algo | None = field(default=None, repr=False, compare=False)  # to splice
    before: Topology | None = field(default=None, repr=False, compare=False)  # its network

    def subchunks(self, collective: Collective) -> int:
        """Pieces per chunk asked for (1 where the pieces are not a multiple of them)."""
        k, c = self.pieces, collective.chunks_per_rank
        return k // c if k % c == 0 else 1


def read_previous(path: str, collective: Collective, topology: Topology, *,
                  routes: bool | None = None) -> Previous:
    """Read ``path`` and check it is a file for ``collective`` on ``topology`` (same
    collective and buffer mode; the same number of ranks, or, with GPUs gone, a file
    of every GPU of the topology its provenance names, which has every GPU ranked now);
    :class:`SpecError` naming the file and what differs. ``routes``: read each chunk's
    tree too (None: where the compile uses them, where no scale method fits; reading
    them costs seconds at 256 GPUs)."""
    try:
        algo = xml_reader.read_msccl(path)
    except TecclError as e:
        raise SpecError(f"expected a previous MSCCL XML file teccl can read ({e})",
                        file=path, key="--from") from None
    for what, theirs, ours in (("coll", algo.coll, collective.kind.value),
                               ("inplace", algo.inplace, int(collective.inplace))):
        if theirs != ours:
            raise SpecError(f"the file has {what}={theirs}, the collective compiled "
                            f"{what}={ours}: it is for another collective",
                            file=path, key="--from")
    layout = Layout(algo.coll, algo.ngpus, algo.nchunksperloop, bool(algo.inplace))
    problem = layout.problem()
    if problem is not None:
        raise SpecError(f"expected an algorithm of {collective.kind.value} ({problem})",
                        file=path, key="--from")
    here, before = _positions(path, algo, collective, topology)
    same = here == list(range(collective.nranks))  # no GPU gone: the file can be spliced
    keep = {"algo": algo if same else None, "before": before if same else None}
    if not (routes if routes is not None else not _scales(topology, collective)):
        return Previous(path, layout.c, None, "the scale backend repairs: its trees go unread",
                        **keep)
    trees, why = _trees(algo, layout, collective, here)
    return Previous(path, layout.c, trees, why, **keep)


def _positions(path: str, algo: Algo, collective: Collective, topology: Topology
               ) -> tuple[list[int | None], Topology | None]:
    """Where each rank of the file is in ``collective`` now (None: its GPU is gone), and
    the topology the file's provenance names where it loads.

    Where the topology the file's provenance names loads, the network compiled now must
    be derived from it (an edit removes and slows links, adds none): a link it does not
    have means the file is for another network."""
    from te_ccl.simulate.msccl import read_provenance

    origin = read_provenance(path)
    before = _load(origin[0]) if origin is not None else None
    if before is not None:
        extra = next((k for k in topology.links if not before.has_link(*k.key)), None)
        if extra is not None:
            raise SpecError(f"the file was compiled for {before.name}, which has no link "
                            f"{extra.src}>{extra.dst}: it is for another network",
                            file=path, key="--from")
    if algo.ngpus == collective.nranks:
        return list(range(algo.ngpus)), before
    differs = (f"the file has ngpus={algo.ngpus}, the collective compiled "
               f"ngpus={collective.nranks}")
    if algo.ngpus < collective.nranks or origin is None:
        raise SpecError(f"{differs}: it is for another collective or topology",
                        file=path, key="--from")
    now = {topology.gpu(r): i for i, r in enumerate(collective.ranks)}
    if before is None or before.ngpus != algo.ngpus or set(now) - set(before.gpus):
        raise SpecError(f"{differs}, and its topology {origin[0]!r} does not load here as "
                        f"{algo.ngpus} GPUs that include every GPU ranked now (GPUs gone are "
                        "matched by name)", file=path, key="--from")
    return [now.get(g) for g in before.gpus], before


def _load(name: str) -> Topology | None:
    """The topology a file's provenance names: shipped, or ``NAME.yaml`` in the working
    directory; None if neither loads."""
    from te_ccl.spec.topology import load_topology

    for candidate in (name, f"{name}.yaml"):
        try:
            return load_topology(candidate)
        except SpecError:
            continue
    return None


def _trees(algo: Algo, layout: Layout, collective: Collective, here: list[int | None]
           ) -> tuple[tuple[Tree, ...] | None, str]:
    """Each chunk's tree (which rank first sent it to each rank) in ``collective``'s
    positions (``here``: of each rank of the file), or None and why the file's sends do
    not say it: a send must carry chunks of the result, whose slot says which chunk it
    is (AllGather and Broadcast without scratch relays). A GPU gone takes its chunks
    with it, and what it relayed goes from the GPU that sent it there."""
    kind = collective.kind
    if kind not in _TREES:
        return None, f"the trees of {kind.value} chunks are not read from a file"
    root = here.index(collective.ranks.index(collective.root)) \
        if collective.root is not None else None
    parent: dict[int, dict[int, int]] = {}  # file chunk -> receiving rank -> sending rank
    for gpu in algo.gpus:
        known = layout.initial_packed(gpu.id) | layout.expected_packed(gpu.id, root)
        for tb in gpu.threadblocks:
            for st in tb.steps:
                if not st.sends or tb.send < 0:
                    continue
                buf, off = (st.dstbuf, st.dstoff) if st.receives else (st.srcbuf, st.srcoff)
                for i in range(off, off + st.cnt):
                    value = known.get(layout.slot(gpu.id, buf, i))
                    parts = expand(value) if value is not None else ()
                    if len(parts) != 1:
                        return None, (f"rank {gpu.id} sends from {buf}[{i}], which holds "
                                      "no single chunk of the result")
                    origin, index = parts[0]
                    chunk = index if kind is CollectiveKind.BROADCAST else \
                        origin * layout.c + index
                    parent.setdefault(chunk, {}).setdefault(tb.send, gpu.id)
    trees = []
    for chunk, tree in sorted(parent.items()):
        owner = root if kind is CollectiveKind.BROADCAST else chunk // layout.c
        if owner is None or here[owner] is None:
            continue  # a chunk of a GPU gone
        edges = []
        for receiver, sender in tree.items():
            seen = set()
            while here[sender] is None and sender in tree and sender not in seen:
                seen.add(sender)
                sender = tree[sender]  # around the GPU gone
            if receiver != owner and here[receiver] is not None and here[sender] is not None:
                edges.append((here[receiver], here[sender]))
        new = chunk if kind is CollectiveKind.BROADCAST else \
            here[owner] * layout.c + chunk % layout.c
        if not _rooted(here[owner], edges):
            return None, (f"chunk {new}'s sends do not all start from its owner, rank "
                          f"{here[owner]} (a file of another root?)")
        trees.append((new, here[owner], tuple(sorted(edges))))
    return tuple(sorted(trees)), ""


def _rooted(owner: int, edges: list[tuple[int, int]]) -> bool:
    """Does every sender of ``edges`` (receiver, sender) get the chunk from ``owner``?

    >>> _rooted(0, [(1, 0), (2, 1)]), _rooted(0, [(1, 0), (3, 2)])
    (True, False)
    """
    parent = dict(edges)
    for node in parent:
        seen = set()
        while node != owner:
            if node in seen or node not in parent:
                return False
            seen.add(node)
            node = parent[node]
    return True


def warm_schedule(previous: Previous, topology: Topology, collective: Collective
                  ) -> Schedule | None:
    """The previous file's trees routed and timed on ``topology`` (switches forward only),
    each piece a chunk as the templates cut theirs (as sub-chunks of one chunk, the
    lowering found no room for a file of 12 pieces per rank on ndv2x4 in the runtime's
    channels); None where the trees are not known or do not deliver every chunk here.

    Cut into the fewest pieces per chunk (a divisor of the file's, each piece on the
    tree of its first) whose replay ends within :data:`QUALITY_GAP` of the lower bound,
    so within that of any file's time: a file of fewer pieces is lowered, verified and
    replayed in less time; else the file's pieces."""
    if previous.trees is None:
        return None
    k = previous.subchunks(collective)
    if collective.chunks_per_rank * k != previous.pieces:
        return None
    bound = lower_bound(topology, collective).seconds
    for d in (d for d in range(1, k) if k % d == 0):
        coarse = _routed(previous, topology,
                         replace(collective, chunks_per_rank=collective.chunks_per_rank * d),
                         k // d)
        if coarse is not None and replay_finish(coarse) <= bound * (1 + QUALITY_GAP):
            return coarse
    return _routed(previous, topology,
                   replace(collective, chunks_per_rank=previous.pieces), 1)


def _routed(previous: Previous, topology: Topology, collective: Collective, k: int,
            template: str = ROUTES) -> Schedule | None:
    """The trees of every ``k``-th piece of the file (the first of each chunk of
    ``collective``) routed and timed as ``collective``'s chunks, as the template
    ``template``; None where they do not deliver every chunk."""
    assert previous.trees is not None
    name = [topology.gpu(r) for r in collective.ranks]
    plans = [ChunkPlan(c // k, name[owner], spread={name[r]: name[s] for r, s in tree})
             for c, owner, tree in previous.trees if c % k == 0]
    try:
        schedule = assemble(template, topology, collective, plans)
    except BaselineError:
        return None
    got = {(t.chunk, t.dst) for t in schedule.transfers}
    if any((c.id, topology.gpu(d)) not in got for c in collective.chunks()
           for d in c.destinations):
        return None
    how = "spliced" if template == SPLICED else "routed again"
    return schedule.with_info(status=f"{WARM} {Path(previous.path).name}, {how}")


def offer_spliced(previous: Previous | None, topology: Topology, collective: Collective,
                  options: CompileOptions, timer: Timer, kept: Incumbent) -> bool:
    """Where the previous file spliced onto ``topology`` (:mod:`te_ccl.compiler.splice`,
    its ways :data:`~te_ccl.compiler.splice.WAYS` tried in turn while near the bound)
    replays within :data:`QUALITY_GAP` of the lower bound, so within that of any
    compile from scratch, and the verifier passes it in full, offer ``kept`` that file;
    its schedule is its routes timed as a template, which the independent checker
    passes. True if kept: it stands, with no other first file and no search
    (:func:`repair`). Else the compile goes on as without it, a note says why."""
    if previous is None or previous.algo is None or previous.before is None \
            or options.fmt != "xml":
        return False
    kept.tell(f"--from: splicing the {WARM}")
    try:
        times = step_times(previous.algo, previous.before, topology, collective)
    except VerificationError as e:  # the file does not run as written: no order to keep
        kept.notes.append(f"--from: the {WARM} is not spliced (its replay fails: {e})")
        return False
    routes = partial(_spliced_schedule, previous, topology, collective)
    found = _standing_splice(previous.algo, previous.before, topology, collective, options,
                             times, kept, routes)
    return found is not None and _offer(found, timer, kept)


@dataclass(frozen=True)
class _Standing:
    """A splice whose written file the verifier passes and whose replay ends within
    :data:`QUALITY_GAP` of the lower bound: that file, its replay and the schedule of
    the trees it routes each chunk on (None: they make none the checker passes)."""

    finish_s: float
    data: bytes
    schedule: Schedule | None


class _Falls(Exception):
    """The spliced file's replay ends past the gap: it is not verified further."""

    def __init__(self, finish_s: float) -> None:
        super().__init__(finish_s)
        self.finish_s = finish_s


def _standing_splice(algo: Algo, before: Topology, topology: Topology,
                     collective: Collective, options: CompileOptions, times: list[float],
                     kept: Incumbent, routes: Callable[[tuple[Tree, ...]], Schedule | None]
                     ) -> _Standing | None:
    """The first splice, by the ways :data:`~te_ccl.compiler.splice.WAYS` in turn, that
    stands (:func:`_verified`) and verifies, with the schedule ``routes`` makes of its
    trees; None (a note says why) where none does. A weighted splice that keeps a link
    too busy to stand or replays beyond :data:`NEAR_GAP` ends the search (the weights
    move a file by a few percent: no other is tried)."""
    coll = collective
    whole = coll.ranks == tuple(range(topology.ngpus))  # the provenance names every GPU
    why, refused = "no splice replays", []
    for way in WAYS:
        got = splice(algo, before, topology, coll, options.runtime, times, way)
        if isinstance(got, str):  # this way cannot splice the file; another may
            refused.append(got)
            continue
        if got.busiest_s > kept.bound_s * (1 + QUALITY_GAP):  # cannot stand: no replay
            why = (f"it keeps a link busy {got.busiest_s / kept.bound_s:.3f}× the lower "
                   "bound")
            if way is QUEUED:
                continue
            break
        program = replace(got.program, name=options.name or got.program.name,
                          min_bytes=options.min_bytes, max_bytes=options.max_bytes)
        data = program_to_xml(program, provenance=(topology.name, coll.size_bytes)
                              if whole else None)
        with _built_beside(routes, got.trees, topology) as schedule:
            try:
                finish, report = _verified(data, topology, coll, options, kept.bound_s)
            except VerificationError as e:  # a deadlock: the verifier would refuse it
                why = str(e)
                continue
            except _Falls as e:
                why = f"it replays at {e.finish_s / kept.bound_s:.3f}× the lower bound"
                if way is not QUEUED and e.finish_s > kept.bound_s * (1 + NEAR_GAP):
                    break
                continue
            if report.valid:
                return _Standing(finish, data, schedule())
        why = f"its file fails verification: {report.errors[0]}"
    if len(refused) == len(WAYS):
        kept.notes.append(f"--from: the {WARM} is not spliced ({refused[0]})")
    else:
        kept.notes.append(f"--from: the {WARM} spliced does not stand ({why}); the "
                          "compile goes on as without it")
    return None


def _verified(data: bytes, topology: Topology, collective: Collective,
              options: CompileOptions, bound_s: float) -> tuple[float, xml_verifier.Report]:
    """The replay of the written file ``data`` and the verifier's report on it, from one
    read of it: the verifier hands what it read to the replay before its checks, and
    stops there (:class:`_Falls`) where the replay ends past :data:`QUALITY_GAP` of
    ``bound_s`` (a file that does not stand is not verified)."""
    finish: list[float] = []

    def replay(algo: Algo) -> None:
        finish.append(simulate_msccl(algo, topology, collective.size_bytes,
                                     ranks=collective.ranks).finish_time_s)
        if finish[0] > bound_s * (1 + QUALITY_GAP):
            raise _Falls(finish[0])

    root = collective.ranks.index(collective.root) if collective.root is not None else None
    report = xml_verifier.verify_msccl(data.decode(), root=root, limits=options.runtime,
                                       read=replay)
    if not finish:  # the verifier read no algorithm: it cannot be replayed either
        raise VerificationError(f"its file does not read: {report.errors[0]}")
    return finish[0], report


@contextmanager
def _built_beside(routes: Callable[[tuple[Tree, ...]], Schedule | None],
                  trees: tuple[Tree, ...], topology: Topology
                  ) -> Iterator[Callable[[], Schedule | None]]:
    """A function giving ``routes(trees)``, the schedule on ``topology`` a splice
    reports: where the trees have :data:`BESIDE_FROM` edges or more and a second core can
    run it, built in a forked process while the body verifies and replays the file (it
    does not wait for them: it takes less time than they do), stopped where the body
    leaves without it (the splice does not stand); else built when asked."""
    if sum(len(edges) for _, _, edges in trees) < BESIDE_FROM or workers() < 2:
        yield partial(routes, trees)
        return
    job = in_background(routes, trees, doing=SPLICING)
    taken = False

    def schedule() -> Schedule | None:
        nonlocal taken
        taken = True
        got = job.result()  # on the child's copy of the topology: the compile's own instead
        return None if got is None else replace(got, topology=topology)

    try:
        yield schedule
    finally:
        if not taken:
            job.cancel()


def _spliced_schedule(previous: Previous, topology: Topology, collective: Collective,
                      trees: tuple[Tree, ...]) -> Schedule | None:
    """The schedule of a splice's ``trees``, timed as a template, where the independent
    checker passes it; else None."""
    schedule = _routed(replace(previous, trees=trees), topology,
                       replace(collective, chunks_per_rank=previous.pieces), 1, SPLICED)
    return None if schedule is None or check_schedule(schedule) else schedule


def _offer(found: _Standing, timer: Timer, kept: Incumbent) -> bool:
    """Offer ``kept`` the splice ``found`` where the checker passes the schedule of its
    routes; True if kept, else a note says why not."""
    schedule = found.schedule
    if schedule is None:
        kept.notes.append(f"--from: the {WARM} spliced is not kept (its routes do not make "
                          "a schedule the checker passes)")
        return False
    timer.replayed(schedule, found.data, found.finish_s)
    return kept.offer(schedule, found.data, found.finish_s,
                      f"first file: {describe(schedule)}")


def first_candidates(previous: Previous | None, topology: Topology, collective: Collective,
                     params: SolveParams, fmt: str = "xml"
                     ) -> Iterator[tuple[str, Callable[[], Schedule | None]]]:
    """The candidates of a compile's first file in format ``fmt``: the previous file's
    routes first (with ``--from``, where no scale method fits: else the scale backend
    repairs), then the registry's cheap ones (:func:`te_ccl.compiler.candidates.first_file`:
    the plan where ``fmt`` takes one, a grid method where one step per chunk and hop is too
    many transfers for a first file, the scale method, the templates) for when they do
    not apply or do not fit the runtime."""
    from te_ccl.compiler.candidates import first_file

    if previous is not None and not _scales(topology, collective):
        yield f"{WARM}'s routes", partial(warm_schedule, previous, topology, collective)
    yield from first_file(topology, collective, params, fmt)


def repair(previous: Previous | None, topology: Topology, collective: Collective,
           params: SolveParams, kept: Incumbent) -> SolveParams | None:
    """What the search after the first file runs: without a previous file, ``params``
    (the whole portfolio); with one, only the repair. Where a scale method fits, the
    scale backend at the previous file's sub-chunks (its seconds-long methods land near
    the bound at any size); else, if the first file is the previous routes and replays
    within :data:`WARM_GAP` of the lower bound, no search: they stand (the flow model
    and the templates were raced when the previous file was compiled); else the
    portfolio, from the file kept, as without a previous file. The repair stands in for
    the portfolio only: a compile that runs one backend runs it."""
    if previous is None or strategy_for(params) != "portfolio":
        return params
    best = kept.best
    if best is not None and best.schedule.info.backend == f"baseline:{SPLICED}" and \
            best.finish_s <= kept.bound_s * (1 + QUALITY_GAP):
        kept.notes.append(f"--from: the {WARM} spliced stands, within {QUALITY_GAP:.0%} of "
                          "the lower bound (compile without --from for the whole search)")
        return None
    if _scales(topology, collective):
        k = previous.subchunks(collective)
        if best is not None and best.schedule.info.backend == "scale" and \
                best.schedule.info.subchunks >= k:
            return None  # the first file is that schedule already
        return replace(params, backend="scale", max_subchunks=k)
    if best is not None and best.schedule.info.backend == f"baseline:{ROUTES}" and \
            best.finish_s <= kept.bound_s * (1 + WARM_GAP):
        kept.notes.append(f"--from: the {WARM}'s routes stand (no scale method fits "
                          f"{topology.name}; compile without --from for the whole search)")
        return None
    return params


def _scales(topology: Topology, collective: Collective) -> bool:
    """Does a method of the scale backend fit?"""
    from te_ccl.backends.scale import scale_method

    return scale_method(topology, collective) is not None
