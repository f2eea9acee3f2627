"""Property: random and mutated YAML never makes a loader fail with anything but SpecError."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.errors import SpecError
from te_ccl.spec.collective import load_collective
from te_ccl.spec.topology import load_topology, shipped_dir

TOPOLOGY_KEYS = ["name", "source", "description", "defaults", "generator", "gpus", "switches",
                 "links", "between", "from", "to", "bandwidth", "latency", "count", "kind",
                 "n", "dims", "box", "join", "nodes", "switch", "copy", "reduce", "buffer",
                 "fred", "ports", "m", "gpu_buffer"]
COLLECTIVE_KEYS = ["collective", "size", "chunks", "ranks", "root", "inplace", "proto",
                   "demands", "source", "destinations"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.floats(allow_nan=True),
    st.sampled_from(["a", "b", "g0", "g1", "sw", "1GB/s", "-2GB/s", "0.7us", "12", "0-3",
                     "all", "ring", "torus", "mesh", "star", "boxes", "dgx1", "allgather",
                     "broadcast", "custom", "LL", "1MB", "direct", "rails", "x.yaml", "3TB/s"]),
    st.text(max_size=6),
)
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _docs(keys: list[str]):
    return st.recursive(SCALARS, lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(st.sampled_from(keys), kids, max_size=5)), max_leaves=25)


def _mutate(text: str, data: st.DataObject) -> str:
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, max(0, len(lines) - 1)))
        op = data.draw(st.sampled_from(["drop", "dup", "cut", "char", "swap"]))
        if not lines:
            break
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
        elif op == "char":
            j = data.draw(st.integers(0, len(lines[i])))
            c = data.draw(st.sampled_from(list(":-[]{},#&*!|> '\"0-9x\t")))
            lines[i] = lines[i][:j] + c + lines[i][j:]
        else:
            k = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[k] = lines[k], lines[i]
    return "\n".join(lines) + "\n"


def _check_topology(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "t.yaml"
        f.write_text(text, encoding="utf-8")
        try:
            load_topology(str(f))
        except SpecError as e:
            assert "\n" not in str(e)


def _check_collective(text: str) -> None:
    topology = load_topology("dgx1")
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "c.yaml"
        f.write_text(text, encoding="utf-8")
        try:
            load_collective(topology, str(f))
        except SpecError as e:
            assert "\n" not in str(e)


@SETTINGS
@given(st.text(max_size=200))
def test_random_text(text):
    _check_topology(text)
    _check_collective(text)


@SETTINGS
@given(_docs(TOPOLOGY_KEYS))
def test_random_topology_documents(doc):
    _check_topology(yaml.safe_dump(doc))


@SETTINGS
@given(_docs(COLLECTIVE_KEYS))
def test_random_collective_documents(doc):
    _check_collective(yaml.safe_dump(doc))


SHIPPED = sorted(p.read_text() for p in shipped_dir().glob("*.yaml")
                 if p.stem in ("dgx1", "ndv2x4", "fred-b", "mi250", "ring8", "rail8x8"))
COLLECTIVE = ("collective: broadcast\nsize: 1MB\nchunks: 2\nranks: [0, 1, 2-5]\nroot: 1\n"
              "inplace: false\nproto: Simple\n")
CUSTOM = "collective: custom\nsize: 4KB\ndemands:\n  - {source: 0, destinations: 1-3}\n"


@SETTINGS
@given(st.sampled_from(SHIPPED), st.data())
def test_mutated_shipped_topologies(text, data):
    _check_topology(_mutate(text, data))


@SETTINGS
@given(st.sampled_from([COLLECTIVE, CUSTOM]), st.data())
def test_mutated_collectives(text, data):
    _check_collective(_mutate(text, data))
