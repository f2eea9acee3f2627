"""Collectives of 3D parallelism as concurrent group operations, and their serial steps.

A :class:`CollectiveOp` is one collective on one group of ranks (an MP All-Reduce, a DP
All-Reduce, the PP sends of a stage boundary...). Several ops run in the same
strategy phase. In a FRED switch every collective becomes *streams* — (sources,
destinations, bytes): the switch reduces what the sources send and delivers the sum
to every destination (the FRED paper, "Flow") — in serial **steps**:

* All-Reduce: one stream (sources = destinations = group);
* Reduce: one stream to the root; Broadcast: one stream from the root;
* Reduce-Scatter over n ranks: n serial Reduce streams of D/n;
* All-Gather: n serial multicasts of D/n (D is the output buffer, nccl-tests);
* All-to-All: n−1 serial steps of unicasts (shift k: rank i → rank i+k) of D/n;
* send/recv (PP): unicasts of D, all in one step.

>>> op = CollectiveOp("reducescatter", (0, 1, 2, 3), 4000)
>>> [s.sources for s in op.steps()[0]], len(op.steps()), op.steps()[1][0].destinations
([(0, 1, 2, 3)], 4, (1,))
"""

from __future__ import annotations

from dataclasses import dataclass

from te_ccl.errors import SpecError

__all__ = ["KINDS", "CLASSES", "operation", "Stream", "CollectiveOp"]

KINDS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "alltoall",
         "sendrecv")
CLASSES = ("MP", "PP", "DP", "IO")  # priority order (the FRED paper: MP > PP > DP)


def operation(inputs: int, outputs: int) -> str:
    """What a switch does with data from ``inputs`` sources for ``outputs`` destinations."""
    return {(True, True): "allreduce", (True, False): "reduce", (False, True): "multicast",
            (False, False): "unicast"}[(inputs > 1, outputs > 1)]


@dataclass(frozen=True)
class Stream:
    """Reduce the data of ``sources`` and deliver it to ``destinations`` (``bytes`` each)."""

    sources: tuple[int, ...]
    destinations: tuple[int, ...]
    bytes: float

    @property
    def operation(self) -> str:
        return operation(len(self.sources), len(self.destinations))


@dataclass(frozen=True)
class CollectiveOp:
    """One collective on one group; ``size_bytes`` follows nccl-tests' conventions."""

    kind: str
    ranks: tuple[int, ...]
    size_bytes: float
    root: int | None = None
    pairs: tuple[tuple[int, int], ...] = ()
    cls: str = "MP"
    label: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError(f"unknown collective {self.kind!r}; expected one of "
                            f"{', '.join(KINDS)}", key="kind")
        if self.cls not in CLASSES:
            raise SpecError(f"unknown priority class {self.cls!r}", key="class")
        if self.size_bytes < 0:
            raise SpecError("size must not be negative", key="size")
        if self.kind in ("broadcast", "reduce") and self.root not in self.ranks:
            raise SpecError(f"root {self.root} not in ranks", key="root")
        if self.kind == "sendrecv" and not self.pairs:
            raise SpecError("sendrecv needs (src, dst) pairs", key="pairs")
        if self.kind != "sendrecv" and len(set(self.ranks)) < 2:
            raise SpecError(f"{self.kind} needs at least two distinct ranks", key="ranks")

    @property
    def n(self) -> int:
        return len(self.ranks)

    @property
    def name(self) -> str:
        return self.label or f"{self.cls}:{self.kind}"

    def steps(self) -> list[list[Stream]]:
        """Serial steps of concurrent in-switch streams (module docstring)."""
        r, d, n = self.ranks, self.size_bytes, self.n
        if self.kind == "allreduce":
            return [[Stream(r, r, d)]]
        if self.kind == "reduce":
            return [[Stream(r, (self.root,), d)]]
        if self.kind == "broadcast":
            return [[Stream((self.root,), r, d)]]
        if self.kind == "reducescatter":
            return [[Stream(r, (x,), d / n)] for x in r]
        if self.kind == "allgather":
            return [[Stream((x,), r, d / n)] for x in r]
        if self.kind == "alltoall":
            return [[Stream((r[i],), (r[(i + k) % n],), d / n) for i in range(n)]
                    for k in range(1, n)]
        return [[Stream((a,), (b,), d) for a, b in self.pairs]]

    def ring_steps(self, members: int) -> int:
        """Dependent steps of a ring over ``members`` (All-Reduce twice round, Reduce-Scatter
        and All-Gather once): each costs a hop's latency."""
        return (2 if self.kind == "allreduce" else 1) * (members - 1)

    def endpoint_injected_bytes(self) -> float:
        """Bytes one member sends with an endpoint (ring / direct) algorithm."""
        n, d = self.n, self.size_bytes
        if self.kind in ("broadcast", "reduce", "sendrecv"):
            return d
        return (2 if self.kind == "allreduce" else 1) * (n - 1) / n * d
