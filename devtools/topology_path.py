"""Follow the topology through one compile: which stages the compiler hands it to.

A *stop* is a call, made by the compiler (``te_ccl.compiler``) or the API, of a function
in another package that takes the :class:`~te_ccl.topology.Topology` as an argument
(calls into the topology's own package are the object's methods, not stages). Repeated
calls into one package in a row are one stop. A stop *climbs back* when its package
lies on a lower layer of the pipeline than the stop before it (the layers of
:mod:`devtools.layers`: IR, read-back, bounds, model, solvers and templates,
FRED, lowering): the compiler went back to an earlier stage.

The judge (:mod:`te_ccl.compiler.judge`) is a stage of the compile layer: it times a
candidate by reading its file back, replaying it on the topology (``te_ccl.simulate``).
Its calls are that stage's own work, as the orchestrators' are, so they are not stops;
they are reported apart as *read-backs*. Counted as stops instead, each candidate after
the first adds a climb back from its backend (layer 5) to the replay (layer 2): that
count is printed too.

Two paths are reported, both of the same stops:

* the *whole compile*: every stop of ``te_ccl.compile`` writing an MSCCL XML, from the
  input checks to the file written, the ``auto`` portfolio's candidates and templates
  among them;
* the *first candidate*: the stops before the first read-back (the judge timing the
  first candidate built): the input checks, the bound and that candidate's backend.

    python -m devtools.topology_path dgx1 allgather 1MB
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import te_ccl
from devtools.layers import layer
from te_ccl.spec import load_topology
from te_ccl.topology.model import Topology

ORCHESTRATORS = ("te_ccl.compiler", "te_ccl.api")
JUDGE = "te_ccl.compiler.judge"


@dataclass(frozen=True)
class Stop:
    """A stop (``module.function``), or with ``read_back`` a call of the judge's."""

    name: str
    read_back: bool = False


def trace(topology: str, collective: str, size: str) -> list[Stop]:
    """The functions, as ``module.name``, at each stop and read-back of one compile
    (``te_ccl.compile``)."""
    stops: list[Stop] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__") or ""
        caller = (frame.f_back.f_globals.get("__name__") or "") if frame.f_back else ""
        if (not module.startswith("te_ccl.") or module.startswith(ORCHESTRATORS)
                or module.startswith("te_ccl.topology") or not caller.startswith(ORCHESTRATORS)):
            return
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(isinstance(frame.f_locals.get(n), Topology) for n in names):
            stop = Stop(f"{module}.{code.co_name}", caller == JUDGE)
            if not stops or stops[-1].read_back != stop.read_back or \
                    _package(stops[-1].name) != _package(module):
                stops.append(stop)

    topo = load_topology(topology)
    with tempfile.TemporaryDirectory() as tmp:
        sys.setprofile(profile)
        try:
            te_ccl.compile(topo, collective, size=size, output=str(Path(tmp) / "out.xml"))
        finally:
            sys.setprofile(None)
    return stops


def _package(name: str) -> str:
    return name.split(".")[1]


def climbs(stops: list[str]) -> int:
    """How many stops lie on a lower layer than the stop before them."""
    layers = [layer(s) for s in stops]
    return sum(1 for a, b in zip(layers, layers[1:], strict=False) if b < a)


def path(stops: list[Stop], read_backs: bool = False) -> list[str]:
    """The stops in order, the judge's read-backs among them only with ``read_backs`` (one
    stop wherever two in a row then fall in one package)."""
    out: list[str] = []
    for s in stops:
        if (read_backs or not s.read_back) and (not out or _package(out[-1]) != _package(s.name)):
            out.append(s.name)
    return out


def first_candidate(stops: list[Stop]) -> list[str]:
    """The stops before the first read-back (all of them if none reads back)."""
    end = next((i for i, s in enumerate(stops) if s.read_back), len(stops))
    return path(stops[:end])


def summary(name: str, stops: list[str]) -> str:
    return (f"{name}: {len(stops)} stops in {len({_package(s) for s in stops})} packages; "
            f"{climbs(stops)} climb back to an earlier layer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("topology")
    ap.add_argument("collective")
    ap.add_argument("size")
    a = ap.parse_args()
    stops = trace(a.topology, a.collective, a.size)
    for s in stops:
        what = "  (the judge reading a file back)" if s.read_back else ""
        print(f"{layer(s.name)} {s.name}{what}")
    print(summary("whole compile", path(stops)))
    print(summary("first candidate", first_candidate(stops)))
    print(f"read-backs: {sum(s.read_back for s in stops)}; "
          + summary("counted as stops, the whole compile", path(stops, read_backs=True)))


if __name__ == "__main__":
    main()
