"""Follow the topology through one compile: which stages the compiler hands it to.

A *stop* is a call, made by the compiler (``te_ccl.compiler``) or the API, of a function
in another package that takes the :class:`~te_ccl.topology.Topology` as an argument
(calls into the topology's own package are the object's methods, not stages). Repeated
calls into one package in a row are one stop. A stop *climbs back* when its package
lies on a lower layer of the pipeline than the stop before it (the layers of
:mod:`devtools.layers`: IR, read-back, bounds, model, solvers and templates,
FRED, lowering): the compiler went back to an earlier stage.

Two counts are reported, both of the same stops:

* the *whole compile*: every stop of ``te_ccl.compile`` writing an MSCCL XML, from the
  input checks to the file written. The ``auto`` portfolio builds candidate after
  candidate, each from its backend or template (layer 5) through its lowering to the
  replay that times it (layer 2), so each candidate after the first climbs back at
  least once: this count grows with the candidates tried.
* the *first candidate*: the stops up to and including the first replay (the first
  stop in ``te_ccl.simulate``, where the judge times the first candidate built): the
  input checks, the bound, that candidate's backend and lowering, and its replay — the
  path one candidate takes through the compile.

    python -m devtools.topology_path dgx1 allgather 1MB
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import te_ccl
from devtools.layers import layer
from te_ccl.spec import load_topology
from te_ccl.topology.model import Topology

ORCHESTRATORS = ("te_ccl.compiler", "te_ccl.api")


def trace(topology: str, collective: str, size: str) -> list[str]:
    """The functions, as ``module.name``, at each stop of one compile (``te_ccl.compile``)."""
    stops: list[str] = []

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
            if not stops or _package(stops[-1]) != _package(module):
                stops.append(f"{module}.{code.co_name}")

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


def first_candidate(stops: list[str]) -> list[str]:
    """The stops up to and including the first replay (all of them if none replays)."""
    replay = next((i for i, s in enumerate(stops) if _package(s) == "simulate"), len(stops))
    return stops[:replay + 1]


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
    first = first_candidate(stops)
    for i, s in enumerate(stops):
        print(f"{layer(s)} {s}{'  <- end of the first candidate' if i == len(first) - 1 else ''}")
    print(summary("whole compile", stops))
    print(summary("first candidate", first))


if __name__ == "__main__":
    main()
