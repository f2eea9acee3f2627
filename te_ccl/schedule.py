"""The Schedule IR: chunk transfers per epoch, the one thing every output is lowered from.

Time is cut into epochs of ``epoch_s`` seconds; epoch ``e`` spans ``[e·τ, (e+1)·τ)``.
A :class:`Transfer` puts one chunk on link ``(src, dst)`` from epoch ``start_epoch``;
``dst`` holds it from the start of ``arrive_epoch``. The model's α semantics (the same
in the simulator and the bounds, after TE-CCL): the link is busy only for
``chunk_bytes / bandwidth``; α delays the arrival. So on a link with bandwidth ``b`` and
latency ``α``:

* it is busy for ``k = ceil(chunk_bytes / (b·τ))`` epochs from ``start_epoch``;
* when ``b·τ ≥ chunk_bytes`` it may start ``floor(b·τ / chunk_bytes)`` chunks per epoch,
  otherwise it carries one chunk at a time;
* the chunks started on a link in one epoch leave it one after the other: the i-th of
  them (i = 1, 2, … in order of arrival) has
  ``arrive_epoch ≥ start_epoch + ceil((i · chunk_bytes / b + α) / τ)``.

``op="copy"``: ``dst`` receives the sender's value of the chunk. ``op="reduce"``: ``dst``
adds the received partial into its own partial (ReduceScatter, AllReduce, Reduce).
Switches without a buffer forward in the epoch a chunk arrives (``start_epoch`` of the
outgoing transfer equals ``arrive_epoch`` of the incoming one).

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.topology import Link, Node, Topology
>>> topo = Topology.build("pair", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
>>> coll = Collective(CollectiveKind.ALLGATHER, 2000, (0, 1))
>>> s = Schedule(topo, coll, 1e-6, (Transfer(0, "a", "b", 0, 1), Transfer(1, "b", "a", 0, 1)))
>>> s.finish_epoch, s.finish_time_s
(1, 1e-06)
>>> Schedule.from_json(s.to_json(), topo) == s
True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from te_ccl.collective.model import Collective, CollectiveKind, CustomDemand
from te_ccl.deadline import checked
from te_ccl.errors import SpecError
from te_ccl.topology.model import Topology

__all__ = ["Transfer", "SolveInfo", "Schedule", "LazyTransfers", "transfers_of"]

SCHEMA = "teccl-schedule/1"


@dataclass(frozen=True, order=True)
class Transfer:
    """Chunk ``chunk`` sent on link ``src → dst`` from ``start_epoch``, held at ``dst`` from ``arrive_epoch``."""

    chunk: int
    src: str
    dst: str
    start_epoch: int
    arrive_epoch: int
    op: str = "copy"  # "copy" | "reduce"


_new, _set = object.__new__, object.__setattr__
BUILDING = "building the schedule's transfers"


def transfers_of(rows: Iterable[tuple[int, str, str, int, int]], op: str = "copy"
                 ) -> list[Transfer]:
    """The transfers of ``(chunk, src, dst, start_epoch, arrive_epoch)`` rows, their
    fields set without the dataclass's ``__init__`` (a 1024-GPU schedule has millions of
    them, seconds of work: the deadline is looked at on the way); the objects are the
    same. Set one by one, the fields stay inline in the object: a dict of its own (a
    ``__dict__`` assigned whole) more than doubles its size.

    >>> transfers_of([(7, "a", "b", 0, 2)]) == [Transfer(7, "a", "b", 0, 2, "copy")]
    True
    """
    out = []
    for chunk, src, dst, start, arrive in checked(rows, BUILDING, every=1 << 16):
        t = _new(Transfer)
        _set(t, "chunk", chunk)
        _set(t, "src", src)
        _set(t, "dst", dst)
        _set(t, "start_epoch", start)
        _set(t, "arrive_epoch", arrive)
        _set(t, "op", op)
        out.append(t)
    return out


@dataclass(frozen=True)
class SolveInfo:
    """How the schedule was obtained; ``optimal`` means proven optimal in the epoch model.

    ``subchunks``: the pieces the scale backend cut each chunk of the asked collective into
    (the schedule's collective has that many times its chunks per rank).
    """

    backend: str = "none"
    solver_time_s: float = 0.0
    optimal: bool = False
    status: str = ""
    variables: int = 0
    constraints: int = 0
    notes: tuple[str, ...] = ()
    subchunks: int = 1


Arrivals = tuple[tuple[str, ...], Any, Any]
"""Node names, and per transfer the index of the node it reaches and its chunk (arrays)."""


class LazyTransfers(Sequence[Transfer]):
    """A schedule's transfers built when first read, their count and last arrival known
    before: a file lowered from a plan of its own (a grid method's) is written and
    replayed without building hundreds of thousands of objects; a tuple once read.

    >>> t = LazyTransfers(1, 2, lambda: [Transfer(7, "a", "b", 0, 2)])
    >>> t
    LazyTransfers(1 transfers, finish epoch 2, not built)
    >>> len(t), t.finish_epoch, t.built, t == (Transfer(7, "a", "b", 0, 2),), t == list(t)
    (1, 2, False, True, False)
    >>> t.built
    True
    """

    def __init__(self, count: int, finish_epoch: int,
                 build: Callable[[], Iterable[Transfer]],
                 arrivals: Callable[[], Arrivals] | None = None) -> None:
        self._count, self.finish_epoch, self._build = count, finish_epoch, build
        self._arrivals = arrivals
        self._built: tuple[Transfer, ...] | None = None

    def arrivals(self) -> Arrivals | None:
        """Where each transfer lands, as arrays without building them — ``(names, dst,
        chunk)``: transfer ``i`` brings chunk ``chunk[i]`` to ``names[dst[i]]`` — or None
        when the maker gave none: a summary of buffers needs no more than this."""
        return self._arrivals() if self._arrivals is not None else None

    @property
    def built(self) -> bool:
        """Whether the transfers were built (read once): what a file lowered from its
        own plan, its count and finish never need."""
        return self._built is not None

    def __repr__(self) -> str:  # never builds them: a repr of a million would be no use
        state = "built" if self.built else "not built"
        return f"LazyTransfers({self._count} transfers, finish epoch {self.finish_epoch}, {state})"

    def _all(self) -> tuple[Transfer, ...]:
        if self._built is None:
            self._built = tuple(self._build())
        return self._built

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: Any) -> Any:  # an index or a slice, as a tuple's
        return self._all()[i]

    def __iter__(self) -> Iterator[Transfer]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (tuple, LazyTransfers)):  # as a tuple: never equal to a list
            return NotImplemented
        return self._all() == tuple(other)

    def __hash__(self) -> int:
        return hash(self._all())


@dataclass(frozen=True)
class Schedule:
    topology: Topology
    collective: Collective
    epoch_s: float
    transfers: tuple[Transfer, ...] | LazyTransfers
    info: SolveInfo = field(default_factory=SolveInfo)

    @property
    def chunk_bytes(self) -> int:
        return self.collective.chunk_bytes

    @property
    def finish_epoch(self) -> int:
        if isinstance(self.transfers, LazyTransfers):
            return self.transfers.finish_epoch
        return max((t.arrive_epoch for t in self.transfers), default=0)

    @property
    def finish_time_s(self) -> float:
        return self.finish_epoch * self.epoch_s

    def with_info(self, **changes: Any) -> Schedule:
        return replace(self, info=replace(self.info, **changes))

    # JSON form ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        c = self.collective
        return {
            "schema": SCHEMA,
            "topology": self.topology.name,
            "collective": {
                "kind": c.kind.value, "size_bytes": c.size_bytes, "ranks": list(c.ranks),
                "chunks_per_rank": c.chunks_per_rank, "root": c.root, "inplace": c.inplace,
                "proto": c.proto,
                "demands": [asdict(d) for d in c.demands],
            },
            "epoch_s": self.epoch_s,
            "chunk_bytes": self.chunk_bytes,
            "finish_epoch": self.finish_epoch,
            "finish_time_s": self.finish_time_s,
            "solve": {**asdict(self.info), "notes": list(self.info.notes)},
            "transfers": [[t.chunk, t.src, t.dst, t.start_epoch, t.arrive_epoch, t.op]
                          for t in self.transfers],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str, topology: Topology, *, file: str = "<schedule>") -> Schedule:
        """Read the JSON form back; ``topology`` must be the one it was compiled for."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"not JSON ({e.msg} at line {e.lineno})", file=file) from None
        try:
            if d.get("schema") != SCHEMA:
                raise SpecError(f"expected schema {SCHEMA!r}", file=file, key="schema")
            cd = d["collective"]
            coll = Collective(
                CollectiveKind(cd["kind"]), int(cd["size_bytes"]), tuple(cd["ranks"]),
                int(cd["chunks_per_rank"]), cd["root"], bool(cd["inplace"]), cd["proto"],
                tuple(CustomDemand(x["source"], tuple(x["destinations"]), x["chunks"])
                      for x in cd.get("demands", [])),
            )
            transfers = tuple(Transfer(int(c), str(s), str(t), int(a), int(b), str(op))
                              for c, s, t, a, b, op in d["transfers"])
            info = SolveInfo(**{**d.get("solve", {}),
                                "notes": tuple(d.get("solve", {}).get("notes", ()))})
            return cls(topology, coll, float(d["epoch_s"]), transfers, info)
        except SpecError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise SpecError(f"malformed schedule JSON ({type(e).__name__}: {e})", file=file) from None
