"""Independent checker of FRED switch tables: do they run on the switches they configure?

It reads only the table files (``flows.csv``, ``uswitches.csv``, ``phases.csv``,
``ports.csv``, ``configs.csv``, ``streams.csv`` and ``tables.json``) and shares no code
with the table builder: the wiring of FRED_m(P), the size of the configuration encoding
and what a flow, a stripe and a stream mean are derived here again from the FRED paper.

Rules (the ``rule`` field of each :class:`Violation`):

``json``        ``tables.json`` holds the rows of the CSV files;
``switch``      flows name known switches with their radix and m; the ports table lists
                each port once, and a lane between two switches is listed at both ends
                with one rate;
``port``        flow ports are in range, and each is at most one flow's input and one
                flow's output per phase;
``capability``  a flow adds inputs only where the switch reduces, and copies to several
                outputs only where it copies;
``flow``        a flow's operation and reduce op are those its ports make it;
``route``       the µSwitch settings, replayed element by element, deliver to each output
                port of a flow exactly the sum of that flow's input ports: nothing lost,
                mixed with another flow, added twice or sent where no flow sends; every
                element exists in FRED_m(P) with its kind, middles are below m, modes
                match the selections;
``phase``       phases follow in time without overlap, each at least the reconfiguration
                time long; flows are in listed phases;
``rate``        no port carries more than its lane's rate × its phase's time after the
                reconfiguration;
``link``        a lane between two switches carries as many bytes of the same stream out
                of one as into the other;
``stream``      in every phase, each destination lane of a stream receives the sum of its
                sources, each once; over all phases each source sends and each
                destination receives the stream's bytes;
``order``       a stream moves only after the streams it waits for are done;
``sram``        each configuration's size is its encoding's, the phases sharing a slot
                have the same settings, and a switch's slots fit its SRAM.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from te_ccl.deadline import check, checked
from te_ccl.errors import SpecError
from te_ccl.nogc import paused_gc

__all__ = ["Violation", "TablesReport", "FILES", "read_fred_tables", "check_fred_tables",
           "check_fred_dir"]

FILES: dict[str, tuple[str, ...]] = {
    "flows.csv": ("switch", "level", "radix", "m", "phase", "priority_class", "collective",
                  "operation", "step", "steps", "flow", "input_ports", "output_ports",
                  "reduce_op", "bytes", "stream"),
    "uswitches.csv": ("switch", "phase", "element", "recursion_level", "stage", "kind", "flow",
                      "input_sel", "output_sel", "mode", "middle"),
    "phases.csv": ("phase", "default_unicast", "start_s", "end_s", "priority_class",
                   "preempts"),
    "ports.csv": ("switch", "port", "neighbour", "lane", "lane_Bps"),
    "configs.csv": ("switch", "phase", "config", "bytes"),
    "streams.csv": ("stream", "chunk", "bytes", "sources", "destinations", "after"),
}
_REL = 1e-9  # relative tolerance of times and rates (the files hold decimal floats)
_SHOWN = 200  # violations kept per rule (the count is exact)


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str


@dataclass(frozen=True)
class TablesReport:
    """What the checker found; ``counts`` has every violation, ``violations`` the first
    :data:`_SHOWN` of each rule; ``replayed``, the switch-phases whose routes were replayed
    (one of each form found clean, :func:`_check_routes`)."""

    source: str
    violations: tuple[Violation, ...]
    counts: dict[str, int]
    phases: int
    flows: int
    streams: int
    time_s: float
    sram_bytes: dict[str, int]
    sram_limit_bytes: int
    replayed: int

    @property
    def clean(self) -> bool:
        return not self.counts

    def to_dict(self) -> dict[str, Any]:
        return {"tables": self.source, "clean": self.clean,
                "violations": sum(self.counts.values()), "by_rule": dict(self.counts),
                "phases": self.phases, "flows": self.flows, "streams": self.streams,
                "time_s": self.time_s, "sram_bytes": self.sram_bytes,
                "sram_limit_bytes": self.sram_limit_bytes,
                "findings": [{"rule": v.rule, "message": v.message} for v in self.violations]}


# Reading --------------------------------------------------------------------------------
def read_fred_tables(directory: str | Path) -> dict[str, str]:
    """The text of every table file in ``directory``.

    Raises
    ------
    SpecError
        If ``directory`` is not a directory or a file is missing or unreadable.
    """
    d = Path(directory)
    if not d.is_dir():
        raise SpecError("expected a directory of FRED tables (teccl compile --fred-tables DIR)",
                        file=str(d))
    texts = {}
    for name in (*FILES, "tables.json"):
        try:
            texts[name] = (d / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SpecError("not UTF-8 text", file=str(d / name)) from None
        except OSError as e:
            raise SpecError(f"cannot read ({e.strerror or e})", file=str(d / name)) from None
    return texts


class _Cells:
    """Typed access to one CSV row (``cells`` in the order of ``index``, its file's
    columns), naming file, line and column in errors."""

    __slots__ = ("file", "line", "cells", "index")  # one per row of every table

    def __init__(self, file: str, line: int, cells: list[str], index: dict[str, int]) -> None:
        self.file, self.line, self.cells, self.index = file, line, cells, index

    @property
    def row(self) -> dict[str, str]:
        """Column → text."""
        return dict(zip(self.index, self.cells, strict=True))

    def _get(self, col: str, convert: Callable[[str], Any], what: str) -> Any:
        text = self.cells[self.index[col]]
        try:
            return convert(text)
        except (TypeError, ValueError):
            raise SpecError(f"expected {what}, got {text!r}", file=self.file, line=self.line,
                            key=col) from None

    def text(self, col: str) -> str:
        return self.cells[self.index[col]]

    def integer(self, col: str) -> int:
        return self._get(col, int, "an integer")

    def flag(self, col: str) -> bool:
        return self._get(col, _bool, "True or False")

    def number(self, col: str) -> float:
        value = self._get(col, float, "a number")
        if not math.isfinite(value):
            raise SpecError(f"expected a finite number, got {self.text(col)!r}", file=self.file,
                            line=self.line, key=col)
        return value

    def ints(self, col: str) -> tuple[int, ...]:
        return self._get(col, lambda t: tuple(int(x) for x in t.split()),
                         "integers separated by spaces")

    def words(self, col: str) -> tuple[str, ...]:
        return tuple(self.text(col).split())


CHECKING = "checking the FRED switch tables"  # what a deadline names


def _rows(texts: Mapping[str, str], name: str) -> list[_Cells]:
    """The rows of CSV file ``name`` (blank lines skipped), each with every column."""
    columns = FILES[name]
    index = {col: i for i, col in enumerate(columns)}
    rows = []
    try:
        reader = csv.reader(io.StringIO(texts[name]))
        if tuple(next(reader, ())) != columns:
            raise SpecError(f"expected the columns {','.join(columns)}", file=name, key="header")
        for cells in checked(reader, CHECKING):
            if not cells:
                continue
            if len(cells) != len(columns):
                raise SpecError(f"expected {len(columns)} cells", file=name,
                                line=reader.line_num)
            rows.append(_Cells(name, reader.line_num, cells, index))
    except csv.Error as e:
        raise SpecError(f"not CSV ({e})", file=name) from None
    return rows


def _cell(value: Any) -> str:
    """A JSON value as the CSV writer spells it."""
    return "" if value is None else str(value)


def _same_rows(copy: Any, parsed: list[_Cells], name: str, text: str) -> bool:
    """Whether ``tables.json``'s rows ``copy`` are the CSV file's: first as the CSV writer
    would spell them (one pass in C), else cell by cell (a file saved by another tool)."""
    columns = FILES[name]
    if not isinstance(copy, list) or len(copy) != len(parsed) or \
            not all(isinstance(j, dict) for j in copy):
        return False
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    try:
        writer.writerows(map(itemgetter(*columns), checked(copy, CHECKING)))  # None: ""
    except KeyError:
        pass  # a column left out: compared cell by cell, as an empty one
    else:
        if buf.getvalue() == text:
            return True
    return all({k: _cell(j.get(k)) for k in columns} == r.row
               for j, r in zip(copy, parsed, strict=True))


# Parsed tables --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Switch:
    radix: int
    m: int
    reduce: bool
    copy: bool


class _Flow(NamedTuple):  # a tuple: one per row of the flows table, built fast
    switch: str
    phase: int
    id: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    bytes: int
    stream: str
    radix: int
    m: int
    operation: str
    reduce_op: str


class _Use(NamedTuple):  # a tuple: one per µSwitch row, built fast
    element: str  # path below the switch's name
    flow: str
    input_sel: str
    output_sel: str
    mode: str
    middle: str
    stage: str
    kind: str
    level: int


@dataclass(frozen=True)
class _Stream:
    bytes: int
    sources: tuple[str, ...]
    destinations: tuple[str, ...]
    after: tuple[str, ...]


@dataclass
class _Tables:
    switches: dict[str, _Switch]
    sram_limit: int
    reconfig_s: float
    declared_sram: dict[str, Any]
    declared_fits: dict[str, Any]
    ports: dict[tuple[str, int], tuple[str, int, float]] = field(default_factory=dict)
    phases: dict[int, tuple[float, float, bool]] = field(default_factory=dict)
    flows: list[_Flow] = field(default_factory=list)
    uses: dict[tuple[str, int], list[_Use]] = field(default_factory=lambda: defaultdict(list))
    configs: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    streams: dict[str, _Stream] = field(default_factory=dict)


def _bool(text: str) -> bool:
    if text not in ("True", "False"):
        raise ValueError(text)
    return text == "True"


def _json(texts: Mapping[str, str]) -> dict[str, Any]:
    try:
        data = json.loads(texts["tables.json"])
    except json.JSONDecodeError as e:
        raise SpecError(f"not JSON ({e.msg})", file="tables.json", line=e.lineno) from None
    if not isinstance(data, dict):
        raise SpecError("expected a JSON object", file="tables.json")
    return data


def _switches(data: dict[str, Any]) -> dict[str, _Switch]:
    raw = data.get("switches")
    if not isinstance(raw, dict) or not raw:
        raise SpecError("expected a mapping of switch names to {radix, m, reduce, copy}",
                        file="tables.json", key="switches")
    out = {}
    for name, d in raw.items():
        try:
            out[name] = _Switch(int(d["radix"]), int(d["m"]), bool(d["reduce"]), bool(d["copy"]))
        except (KeyError, TypeError, ValueError):
            raise SpecError("expected {radix, m, reduce, copy}", file="tables.json",
                            key=f"switches.{name}") from None
        if out[name].radix < 2 or out[name].m < 2:
            raise SpecError("expected radix >= 2 and m >= 2", file="tables.json",
                            key=f"switches.{name}")
    return out


def _number(data: dict[str, Any], key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise SpecError("expected a number >= 0", file="tables.json", key=key)
    return value


def _parse(texts: Mapping[str, str], out: list[Violation]) -> _Tables:
    data = _json(texts)
    declared = []
    for key in ("config_bytes", "fits"):
        if not isinstance(data.get(key), dict):
            raise SpecError("expected a mapping of switch names", file="tables.json", key=key)
        declared.append(data[key])
    t = _Tables(_switches(data), int(_number(data, "sram_bytes")), _number(data, "reconfig_s"),
                *declared)
    rows = {name: _rows(texts, name) for name in FILES}
    for name, parsed in rows.items():
        table = name.removesuffix(".csv")
        if not _same_rows(data.get(table), parsed, name, texts[name]):
            out.append(Violation("json", f"tables.json's {table} differ from {name}"))
    for r in checked(rows["ports.csv"], CHECKING):
        key = (r.text("switch"), r.integer("port"))
        if key in t.ports:
            out.append(Violation("switch", f"{key[0]} port {key[1]} is listed twice"))
        t.ports[key] = (r.text("neighbour"), r.integer("lane"), r.number("lane_Bps"))
    for r in checked(rows["phases.csv"], CHECKING):
        index = r.integer("phase")
        if index in t.phases:
            out.append(Violation("phase", f"phase {index} is listed twice"))
        t.phases[index] = (r.number("start_s"), r.number("end_s"), r.flag("default_unicast"))
    for r in checked(rows["flows.csv"], CHECKING):
        t.flows.append(_Flow(r.text("switch"), r.integer("phase"), r.text("flow"),
                             r.ints("input_ports"), r.ints("output_ports"), r.integer("bytes"),
                             r.text("stream"), r.integer("radix"), r.integer("m"),
                             r.text("operation"), r.text("reduce_op")))
    for r in checked(rows["uswitches.csv"], CHECKING):
        # the largest table by far: its cells unpacked in FILES' order, its numbers read
        # at once (by column, naming it, only where one is not an integer)
        sw, phase_text, path, level_text, stage, kind, flow, input_sel, output_sel, mode, \
            middle = r.cells
        try:
            phase, level = int(phase_text), int(level_text)
        except ValueError:
            phase, level = r.integer("phase"), r.integer("recursion_level")
        mine = f"{sw}/"
        t.uses[(sw, phase)].append(_Use(path.removeprefix(mine) if path.startswith(mine)
                                        else f"?{path}", flow, input_sel, output_sel, mode,
                                        middle, stage, kind, level))
    for r in checked(rows["configs.csv"], CHECKING):
        key = (r.text("switch"), r.integer("phase"))
        if key in t.configs:
            out.append(Violation("sram", f"{key[0]} has two configurations in phase {key[1]}"))
        t.configs[key] = (r.text("config"), r.integer("bytes"))
    for r in checked(rows["streams.csv"], CHECKING):
        sid = r.text("stream")
        if sid in t.streams:
            out.append(Violation("stream", f"stream {sid} is listed twice"))
        t.streams[sid] = _Stream(r.integer("bytes"), r.words("sources"), r.words("destinations"),
                                 r.words("after"))
    return t


# FRED_m(P), again from the FRED paper -------------------------------------------------------------
_KINDS = {"in": ("input", "R"), "out": ("output", "D"), "base": ("base", "RD"),
          "demux": ("demux", "DEMUX"), "mux": ("mux", "MUX")}


@lru_cache(maxsize=64)
def _elements(ports: int, m: int) -> dict[str, str]:
    """Every µSwitch of FRED_m(ports), path below the root → its kind name (``in``,
    ``out``, ``base``, ``demux``, ``mux``): P = 2r has r input and r output µSwitches and
    m middles of r ports, P = 2r+1 adds a DEMUX and a MUX and middles of r+1 ports,
    FRED_m(2) is one base element."""
    out: dict[str, str] = {}

    def walk(prefix: str, p: int) -> None:
        if p == 2:
            out[f"{prefix}base"] = "base"
            return
        r, odd = divmod(p, 2)
        for i in range(r):
            out[f"{prefix}in{i}"] = "in"
            out[f"{prefix}out{i}"] = "out"
        if odd:
            out[f"{prefix}demux"] = "demux"
            out[f"{prefix}mux"] = "mux"
        for c in range(m):
            walk(f"{prefix}mid{c}/", r + odd)

    walk("", ports)
    return out


def _width(kind: str, m: int) -> int:
    """Bits of one element's field: 4 for a base, a middle for DEMUX/MUX, two for R/D."""
    cb = math.ceil(math.log2(m + 1))
    return {"base": 4, "demux": cb, "mux": cb}.get(kind, 2 * cb)


@lru_cache(maxsize=64)
def _dense_bits(ports: int, m: int) -> int:
    return sum(_width(k, m) for k in _elements(ports, m).values())


def _config_bytes(ports: int, m: int, configured: set[str]) -> int:
    """Bytes of one configuration: a format bit, then the dense form (every element's
    field) or the sparse form (16-bit count, then index and field of each configured
    element), whichever is shorter, rounded up to bytes."""
    elements = _elements(ports, m)
    dense = _dense_bits(ports, m)
    ib = max(1, math.ceil(math.log2(len(elements))))
    sparse = 16 + sum(ib + _width(elements[e], m) for e in configured)
    return math.ceil((1 + (sparse if sparse < dense else dense)) / 8)


# the modes an element may list, by whether it merges inputs and whether it copies to outputs
_MODES = {(True, True): {"reduce-broadcast"}, (True, False): {"reduce"},
          (False, True): {"broadcast"}, (False, False): {"forward", "cross"}}


@lru_cache(maxsize=256)
def _sides(text: str) -> tuple[int, ...]:
    sides = tuple(int(x) for x in text.split("+"))
    if not sides or any(s not in (0, 1) for s in sides) or len(set(sides)) < len(sides):
        raise ValueError(text)
    return sides


def _mid(text: str, m: int) -> int:
    if not text.startswith("mid") or not 0 <= int(text[3:]) < m:
        raise ValueError(text)
    return int(text[3:])


class _Setting(NamedTuple):
    """One flow's use of one element, parsed: input sides / middle in, output sides /
    middle out (a side tuple or a middle index)."""

    flow: str
    src: tuple[int, ...] | int
    dst: tuple[int, ...] | int


@lru_cache(maxsize=4096)
def _selections(kind: str, input_sel: str, output_sel: str, middle: str, m: int
                ) -> tuple[tuple[int, ...] | int, tuple[int, ...] | int] | None:
    """An element's selections parsed (:class:`_Setting`'s ``src`` and ``dst``), or None
    where they or the middle listed do not fit its kind (few distinct ones: cached)."""
    src: tuple[int, ...] | int
    dst: tuple[int, ...] | int
    try:
        if kind in ("in", "demux"):
            src, dst = _sides(input_sel), _mid(output_sel, m)
        elif kind in ("out", "mux"):
            src, dst = _mid(input_sel, m), _sides(output_sel)
        else:
            src, dst = _sides(input_sel), _sides(output_sel)
    except ValueError:
        return None
    if kind == "base":
        return None if middle else (src, dst)
    return (src, dst) if middle == str(src if isinstance(src, int) else dst) else None


def _settings(sw: str, phase: int, uses: list[_Use], m: int, elements: dict[str, str],
              out: list[Violation]) -> dict[str, list[_Setting]]:
    """The uses of one (switch, phase) by element, each checked against the structure."""
    by_element: dict[str, list[_Use]] = defaultdict(list)
    for u in uses:
        by_element[u.element].append(u)
    settings: dict[str, list[_Setting]] = {}
    for path, group in by_element.items():
        kind = elements.get(path)
        if kind is None:
            out.append(Violation("route", f"{sw} phase {phase} {sw}/{path}: no such µSwitch "
                                          f"in FRED_{m}"))
            continue
        parsed = []
        listed = (*_KINDS[kind], path.count("/"))  # stage, kind, recursion level
        merged_in = merged_out = False
        for u in group:
            if (u.stage, u.kind, u.level) != listed:
                out.append(Violation("route", f"{sw} phase {phase} {sw}/{path}: a {listed[1]} "
                                              f"element in stage {listed[0]} at recursion level "
                                              f"{listed[2]}, listed as {u.kind}/{u.stage} "
                                              f"at {u.level}"))
            selected = _selections(kind, u.input_sel, u.output_sel, u.middle, m)
            if selected is None:
                out.append(Violation("route", f"{sw} phase {phase} {sw}/{path}: flow {u.flow} "
                                              f"has selections {u.input_sel}/{u.output_sel} "
                                              f"middle {u.middle!r}"))
                continue
            src, dst = selected
            merged_in = merged_in or (isinstance(src, tuple) and len(src) == 2)
            merged_out = merged_out or (isinstance(dst, tuple) and len(dst) == 2)
            parsed.append(_Setting(u.flow, src, dst))
        modes = {u.mode for u in group}
        if len(modes) > 1 or not modes <= _MODES[(merged_in, merged_out)]:
            out.append(Violation("route", f"{sw} phase {phase} {sw}/{path}: mode "
                                          f"{'/'.join(sorted(modes))} does not match its "
                                          "selections"))
        settings[path] = parsed
    return settings


@lru_cache(maxsize=1024)
def _names(prefix: str, r: int, m: int) -> tuple[tuple[str, ...], tuple[str, ...],
                                                 tuple[str, ...]]:
    """The paths of the input and output µSwitches and the middles' prefixes of the
    (sub)switch at ``prefix``: the same for every phase of every switch of its size."""
    return (tuple(f"{prefix}in{i}" for i in range(r)), tuple(f"{prefix}out{i}" for i in range(r)),
            tuple(f"{prefix}mid{c}/" for c in range(m)))


class _Replay:
    """Data through one switch in one phase: a value is the set of the switch's input
    ports whose data it sums."""

    def __init__(self, where: str, m: int, settings: dict[str, list[_Setting]],
                 owner: dict[int, str], out: list[Violation]) -> None:
        self.where, self.m, self.settings, self.owner, self.out = where, m, settings, owner, out
        self.owns: dict[str, frozenset[int]] = {}  # each flow's input ports, by owner
        for p, flow in owner.items():
            self.owns[flow] = self.owns.get(flow, frozenset()) | {p}

    def _bad(self, message: str) -> None:
        self.out.append(Violation("route", f"{self.where}: {message}"))

    def _take(self, path: str, s: _Setting, ins: dict[int, frozenset[int]],
              sides: tuple[int, ...]) -> frozenset[int]:
        parts = [ins[x] for x in sides if x in ins]
        value = parts[0] if len(parts) == 1 else frozenset().union(*parts)
        if len(parts) > 1 and sum(map(len, parts)) > len(value):
            self._bad(f"{path} adds an input to itself")
        if value <= self.owns.get(s.flow, frozenset()):
            return value  # all of it s.flow's
        strangers = {self.owner.get(p, "?") for p in value} - {s.flow}
        if strangers:
            self._bad(f"{path} carries data of flow {', '.join(sorted(strangers))} as flow "
                      f"{s.flow}")
        return value

    def _put(self, path: str, into: dict[int, frozenset[int]], key: int,
             value: frozenset[int]) -> None:
        if key in into:
            self._bad(f"{path}: two flows' data meet on one wire")
        into[key] = into.get(key, frozenset()) | value

    def run(self, prefix: str, ports: int, ins: dict[int, frozenset[int]]
            ) -> dict[int, frozenset[int]]:
        """Outputs of the (sub)switch at ``prefix`` with ``ports`` ports given its inputs."""
        out: dict[int, frozenset[int]] = {}
        if ports == 2:
            for s in self.settings.get(f"{prefix}base", ()):
                value = self._take(f"{prefix}base", s, ins, s.src)
                for side in s.dst:
                    if value:
                        self._put(f"{prefix}base", out, side, value)
            return out
        r, odd = divmod(ports, 2)
        ins_at, outs_at, mid_at = _names(prefix, r, self.m)
        mids: list[dict[int, frozenset[int]]] = [{} for _ in range(self.m)]
        for i, path in enumerate(ins_at):
            for s in self.settings.get(path, ()):
                local = {x: ins[2 * i + x] for x in (0, 1) if 2 * i + x in ins}
                value = self._take(path, s, local, s.src)
                if value:
                    self._put(path, mids[s.dst], i, value)
        for s in self.settings.get(f"{prefix}demux", ()) if odd else ():
            value = self._take(f"{prefix}demux", s, {0: ins[ports - 1]} if ports - 1 in ins
                               else {}, s.src)
            if value:
                self._put(f"{prefix}demux", mids[s.dst], r, value)
        below = [self.run(mid_at[c], r + odd, mids[c]) if mids[c] else {}
                 for c in range(self.m)]
        for i, path in enumerate(outs_at):
            for s in self.settings.get(path, ()):
                value = below[s.src].get(i, frozenset())
                if value:
                    self._take(path, s, {0: value}, (0,))
                    for side in s.dst:
                        self._put(path, out, 2 * i + side, value)
        for s in self.settings.get(f"{prefix}mux", ()) if odd else ():
            value = below[s.src].get(r, frozenset())
            if value:
                self._take(f"{prefix}mux", s, {0: value}, (0,))
                self._put(f"{prefix}mux", out, ports - 1, value)
        return out


# Checks ----------------------------------------------------------------------------------
def _close(a: float, b: float) -> float:
    return _REL * max(abs(a), abs(b), 1e-12)


def _check_ports(t: _Tables, out: list[Violation]) -> None:
    for name, sw in t.switches.items():
        listed = {p for (s, p) in t.ports if s == name}
        missing = sorted(set(range(sw.radix)) - listed)
        if missing or len(listed) != sw.radix:
            out.append(Violation("switch", f"{name}: ports.csv lists {len(listed)} of its "
                                           f"{sw.radix} ports (missing {missing[:5]})"))
    at: dict[tuple[str, str, int], list[tuple[int, float]]] = defaultdict(list)
    for (s, p), (nb, lane, rate) in t.ports.items():
        if s not in t.switches:
            out.append(Violation("switch", f"ports.csv lists unknown switch {s}"))
        if not rate > 0:
            out.append(Violation("switch", f"{s} port {p}: lane rate {rate} is not positive"))
        at[(s, nb, lane)].append((p, rate))
    for (s, nb, lane), found in at.items():
        if nb in t.switches:
            back = at.get((nb, s, lane), [])
            if len(found) != 1 or len(back) != 1 or back[0][1] != found[0][1]:
                out.append(Violation("switch", f"lane {lane} between {s} and {nb} is not one "
                                               "port at each end with one rate"))


def _peer(t: _Tables) -> dict[tuple[str, int], tuple[str, int]]:
    """The far end (switch, port) of each switch-to-switch lane."""
    index = {(s, nb, lane): p for (s, p), (nb, lane, _) in t.ports.items()}
    return {(s, p): (nb, index[(nb, s, lane)]) for (s, p), (nb, lane, _) in t.ports.items()
            if (nb, s, lane) in index}


def _check_phases(t: _Tables, out: list[Violation]) -> None:
    previous: tuple[int, float] | None = None
    for index in sorted(t.phases):
        start, end, _ = t.phases[index]
        if end - start < t.reconfig_s - _close(end, start):
            out.append(Violation("phase", f"phase {index} lasts {end - start:.6g} s, less than "
                                          f"the reconfiguration time {t.reconfig_s:.6g} s"))
        if previous is not None and start < previous[1] - _close(start, previous[1]):
            out.append(Violation("phase", f"phase {index} starts at {start:.9g} s, before "
                                          f"phase {previous[0]} ends ({previous[1]:.9g} s)"))
        previous = (index, end)


def _check_flows(t: _Tables, out: list[Violation]) -> dict[tuple[str, int], list[_Flow]]:
    """Per-flow checks; returns the flows of each (switch, phase) that can be replayed."""
    groups: dict[tuple[str, int], list[_Flow]] = defaultdict(list)
    for f in t.flows:
        sw = t.switches.get(f.switch)
        where = f"{f.switch} phase {f.phase} flow {f.id}"
        if sw is None or (f.radix, f.m) != (sw.radix, sw.m):
            out.append(Violation("switch", f"{where}: not a switch of tables.json with radix "
                                           f"{f.radix} and m {f.m}"))
            continue
        if f.phase not in t.phases:
            out.append(Violation("phase", f"{where}: phase {f.phase} is not in phases.csv"))
            continue
        bad = [p for p in (*f.inputs, *f.outputs) if not 0 <= p < sw.radix]
        if bad or not f.inputs or not f.outputs:
            out.append(Violation("port", f"{where}: ports {bad or 'missing'} (radix {sw.radix})"))
            continue
        if f.bytes < 0:
            out.append(Violation("rate", f"{where}: carries {f.bytes} B"))
        many_in, many_out = len(set(f.inputs)) > 1, len(set(f.outputs)) > 1
        operation = {(True, True): "allreduce", (True, False): "reduce",
                     (False, True): "multicast", (False, False): "unicast"}[(many_in, many_out)]
        if (f.operation, f.reduce_op == "sum") != (operation, many_in) or \
                f.reduce_op not in ("sum", "none"):
            out.append(Violation("flow", f"{where}: listed as {f.operation} with reduce op "
                                         f"{f.reduce_op}, its ports make it {operation}"))
        if len(f.inputs) > 1 and not sw.reduce:
            out.append(Violation("capability", f"{where}: adds {len(f.inputs)} inputs on a "
                                               "switch that does not reduce"))
        if len(f.outputs) > 1 and not sw.copy:
            out.append(Violation("capability", f"{where}: copies to {len(f.outputs)} outputs "
                                               "on a switch that does not copy"))
        start, end, _ = t.phases[f.phase]
        budget = end - start - t.reconfig_s
        for p in (*f.inputs, *f.outputs):
            rate = t.ports.get((f.switch, p), ("", 0, 0.0))[2]
            if f.bytes > rate * budget * (1 + _REL) + 1:
                out.append(Violation("rate", f"{where}: port {p} carries {f.bytes} B in "
                                             f"{budget:.6g} s, over its lane's {rate:.6g} B/s"))
                break
        groups[(f.switch, f.phase)].append(f)
    multi = {f.phase for f in t.flows if len(f.inputs) > 1 or len(f.outputs) > 1}
    for index, (_, _, unicast) in t.phases.items():
        if unicast == (index in multi):
            out.append(Violation("phase", f"phase {index}: default_unicast is {unicast}, but "
                                          f"it has {'' if index in multi else 'no '}flow that "
                                          "adds or copies"))
    for (sw, phase), flows in groups.items():
        seen: dict[tuple[str, int], str] = {}
        ids: set[str] = set()
        for f in flows:
            if f.id in ids:
                out.append(Violation("port", f"{sw} phase {phase}: flow id {f.id} used twice"))
            ids.add(f.id)
            for side, ports in (("input", f.inputs), ("output", f.outputs)):
                for p in set(ports):
                    other = seen.setdefault((side, p), f.id)
                    if other != f.id:
                        out.append(Violation("port", f"{sw} phase {phase}: port {p} is the "
                                                     f"{side} of flows {other} and {f.id}"))
    return groups


def _check_routes(t: _Tables, groups: dict[tuple[str, int], list[_Flow]],
                  out: list[Violation]) -> tuple[dict[tuple[str, int], frozenset], int]:
    """Replay every switch in every phase; returns each configuration's settings
    (flow names left out), for the SRAM slots, and how many switch-phases were replayed.
    A switch whose settings and flows are, flows renamed, those of one whose replay found
    nothing (:func:`_form`: the phases of a schedule repeat a few patterns on every
    switch) finds nothing either, and is not replayed again."""
    signatures: dict[tuple[str, int], frozenset] = {}
    clean: set[tuple] = set()  # the forms whose replay found nothing
    replayed = 0
    for key in checked(sorted(set(groups) | set(t.uses)), CHECKING, every=64):
        sw_name, phase = key
        sw = t.switches.get(sw_name)
        if sw is None:
            out.append(Violation("switch", f"uswitches.csv configures unknown switch {sw_name}"))
            continue
        flows = groups.get(key, [])
        where = f"{sw_name} phase {phase}"
        elements = _elements(sw.radix, sw.m)
        settings = _settings(sw_name, phase, t.uses.get(key, []), sw.m, elements, out)
        signatures[key] = frozenset((path, s.src, s.dst) for path, ss in settings.items()
                                    for s in ss)
        owner = {p: f.id for f in flows for p in f.inputs}
        form = _form(sw, settings, flows, owner)
        if form in clean:
            continue
        found = len(out)
        replayed += 1
        replay = _Replay(where, sw.m, settings, owner, out)
        delivered = replay.run("", sw.radix, {p: frozenset((p,)) for p in owner})
        wanted = {p: frozenset(f.inputs) for f in flows for p in f.outputs}
        for p in sorted(set(delivered) | set(wanted)):
            got, want = delivered.get(p, frozenset()), wanted.get(p)
            if want is None:
                out.append(Violation("route", f"{where}: output port {p} receives input ports "
                                              f"{sorted(got)}, no flow's output"))
            elif got != want:
                out.append(Violation("route", f"{where}: output port {p} of flow "
                                              f"{owner.get(next(iter(want)))} receives input "
                                              f"ports {sorted(got)}, not {sorted(want)}"))
        if len(out) == found:
            clean.add(form)
    return signatures, replayed


def _form(sw: _Switch, settings: dict[str, list[_Setting]], flows: list[_Flow],
          owner: dict[int, str]) -> tuple:
    """What the replay of one switch in one phase depends on, each flow named by the
    lowest input port it owns (``owner``; else by its id): the switch's size, the
    settings and flows counted with their repeats (a repeat is a finding), and the owner
    of each input port. The replay compares flows only with each other, so two switches
    of one form replay alike but for the names in their findings."""
    name: dict[str, int] = {}
    for p in sorted(owner):
        name.setdefault(owner[p], p)
    return (sw.radix, sw.m,
            frozenset(Counter((path, s.src, s.dst, name.get(s.flow, s.flow))
                              for path, ss in settings.items() for s in ss).items()),
            frozenset(Counter((name.get(f.id, f.id), f.inputs, f.outputs)
                              for f in flows).items()),
            frozenset((p, name[f]) for p, f in owner.items()))


def _check_links(t: _Tables, groups: dict[tuple[str, int], list[_Flow]],
                 peer: dict[tuple[str, int], tuple[str, int]], out: list[Violation]) -> None:
    sent: dict[tuple[int, str, int], _Flow] = {}
    read: dict[tuple[int, str, int], _Flow] = {}
    for (sw, phase), flows in groups.items():
        for f in flows:
            for p in f.outputs:
                sent[(phase, sw, p)] = f
            for p in f.inputs:
                read[(phase, sw, p)] = f
    for (phase, sw, p), f in sent.items():
        if (sw, p) not in peer:
            continue
        far = peer[(sw, p)]
        g = read.get((phase, *far))
        if g is None:
            out.append(Violation("link", f"phase {phase}: {sw} sends flow {f.id} to {far[0]} "
                                         f"(its port {far[1]}), where no flow reads it"))
        elif (g.bytes, g.stream) != (f.bytes, f.stream):
            out.append(Violation("link", f"phase {phase}: {sw} sends {f.bytes} B of stream "
                                         f"{f.stream or '-'} to {far[0]}, which reads {g.bytes} "
                                         f"B of stream {g.stream or '-'}"))
    for (phase, sw, p), g in read.items():
        if (sw, p) in peer and (phase, *peer[(sw, p)]) not in sent:
            out.append(Violation("link", f"phase {phase}: {sw} flow {g.id} reads port {p} "
                                         f"from {peer[(sw, p)][0]}, which sends nothing there"))


def _check_streams(t: _Tables, groups: dict[tuple[str, int], list[_Flow]],
                   peer: dict[tuple[str, int], tuple[str, int]], out: list[Violation]) -> None:
    """End to end, phase by phase: which NPUs' data each destination lane receives."""
    by_output: dict[tuple[int, str, int], _Flow] = {}
    for (sw, phase), flows in groups.items():
        for f in flows:
            for p in f.outputs:
                by_output[(phase, sw, p)] = f
    memo: dict[tuple[int, str, str], frozenset[str]] = {}
    busy: set[tuple[int, str, str]] = set()

    def value(f: _Flow) -> frozenset[str]:
        key = (f.phase, f.switch, f.id)
        if key in memo:
            return memo[key]
        if key in busy:
            out.append(Violation("stream", f"phase {f.phase}: flows feed each other in a "
                                           f"cycle through {f.switch}"))
            return frozenset()
        busy.add(key)
        parts = []
        for p in f.inputs:
            if (f.switch, p) in peer:
                up = by_output.get((f.phase, *peer[(f.switch, p)]))
                parts.append(value(up) if up is not None else frozenset())
            else:
                parts.append(frozenset((t.ports.get((f.switch, p), ("?",))[0],)))
        total = frozenset().union(*parts)
        if sum(map(len, parts)) > len(total):
            out.append(Violation("stream", f"phase {f.phase}: {f.switch} flow {f.id} adds "
                                           "an NPU's data twice"))
        memo[key] = total
        busy.discard(key)
        return total

    sent: dict[tuple[str, str], int] = defaultdict(int)
    got: dict[tuple[str, str], int] = defaultdict(int)
    phases_of: dict[str, list[int]] = defaultdict(list)
    for (sw, phase), flows in groups.items():
        for f in flows:
            if not f.stream:
                continue
            s = t.streams.get(f.stream)
            if s is None:
                out.append(Violation("stream", f"{sw} phase {phase} flow {f.id}: stream "
                                               f"{f.stream} is not in streams.csv"))
                continue
            if f.bytes:
                phases_of[f.stream].append(phase)
            for p in f.inputs:
                if (sw, p) not in peer:
                    sent[(f.stream, t.ports.get((sw, p), ("?",))[0])] += f.bytes
            for p in f.outputs:
                if (sw, p) in peer:
                    continue
                npu = t.ports.get((sw, p), ("?",))[0]
                got[(f.stream, npu)] += f.bytes
                if f.bytes and value(f) != frozenset(s.sources):
                    out.append(Violation("stream", f"phase {phase}: {npu} receives from {sw} "
                                                   f"flow {f.id} the sum of "
                                                   f"{' '.join(sorted(value(f))) or 'nothing'}, "
                                                   f"not of stream {f.stream}'s sources"))
    for sid, s in t.streams.items():
        for what, ends, totals in (("sends", s.sources, sent), ("receives", s.destinations, got)):
            for npu in sorted(set(ends) | {n for (x, n) in totals if x == sid}):
                n = totals.get((sid, npu), 0)
                if n != (s.bytes if npu in ends else 0):
                    out.append(Violation("stream", f"stream {sid}: {npu} {what} {n} B of its "
                                                   f"{s.bytes if npu in ends else 0} B"))
        for a in s.after:
            if a not in t.streams:
                out.append(Violation("order", f"stream {sid} waits for unknown stream {a}"))
            elif phases_of[sid] and phases_of[a] and min(phases_of[sid]) <= max(phases_of[a]):
                out.append(Violation("order", f"stream {sid} moves in phase "
                                              f"{min(phases_of[sid])}, before stream {a} is done "
                                              f"(phase {max(phases_of[a])})"))


def _check_sram(t: _Tables, groups: dict[tuple[str, int], list[_Flow]],
                signatures: dict[tuple[str, int], frozenset], out: list[Violation]
                ) -> dict[str, int]:
    slots: dict[tuple[str, str], tuple[int, frozenset, int]] = {}
    for key in sorted(set(groups) | set(t.uses) | set(t.configs)):
        sw_name, phase = key
        sw = t.switches.get(sw_name)
        if sw is None:
            continue
        where = f"{sw_name} phase {phase}"
        if key not in t.configs:
            out.append(Violation("sram", f"{where}: no configuration in configs.csv"))
            continue
        slot, size = t.configs[key]
        flows = groups.get(key, [])
        if slot == "default":
            if size or any(len(f.inputs) > 1 or len(f.outputs) > 1 for f in flows):
                out.append(Violation("sram", f"{where}: the default configuration routes "
                                             "unicast flows only, at no SRAM cost"))
            continue
        configured = {u.element for u in t.uses.get(key, [])} & set(_elements(sw.radix, sw.m))
        need = _config_bytes(sw.radix, sw.m, configured)
        if size != need:
            out.append(Violation("sram", f"{where}: configuration {slot} is listed as {size} "
                                         f"B, its encoding takes {need} B"))
        sig = signatures.get(key, frozenset())
        first = slots.setdefault((sw_name, slot), (phase, sig, need))
        if first[1] != sig:
            out.append(Violation("sram", f"{where}: configuration {slot} differs from phase "
                                         f"{first[0]}'s, which shares its slot"))
    used: dict[str, int] = dict.fromkeys(t.switches, 0)
    for (sw_name, _), (_, _, size) in slots.items():
        used[sw_name] += size
    for name, n in used.items():
        if _cell(t.declared_sram.get(name)) != str(n) or \
                _cell(t.declared_fits.get(name)) != str(n <= t.sram_limit):
            out.append(Violation("sram", f"{name}: tables.json declares {t.declared_sram.get(name)}"
                                         f" B of SRAM (fits {t.declared_fits.get(name)}), its "
                                         f"configurations take {n} B"))
        if n > t.sram_limit:
            out.append(Violation("sram", f"{name}: its configurations take {n} B of its "
                                         f"{t.sram_limit} B of SRAM"))
    return used


def _kept(violations: list[Violation]) -> Iterator[Violation]:
    shown: dict[str, int] = defaultdict(int)
    for v in violations:
        shown[v.rule] += 1
        if shown[v.rule] <= _SHOWN:
            yield v


def check_fred_tables(texts: Mapping[str, str], source: str = "") -> TablesReport:
    """Every violation of the tables whose file texts are ``texts`` (file name → text).

    Raises
    ------
    SpecError
        If a file is missing, is not CSV/JSON with the expected columns, or holds a value
        of the wrong type.
    """
    missing = [n for n in (*FILES, "tables.json") if n not in texts]
    if missing:
        raise SpecError("missing file", file=missing[0])
    out: list[Violation] = []
    with paused_gc():  # the rows' objects hold no cycles
        t = _parse(texts, out)
        check(CHECKING)
        _check_ports(t, out)
        _check_phases(t, out)
        peer = _peer(t)
        groups = _check_flows(t, out)
        check(CHECKING)
        signatures, replayed = _check_routes(t, groups, out)
        check(CHECKING)
        _check_links(t, groups, peer, out)
        _check_streams(t, groups, peer, out)
        check(CHECKING)
        sram = _check_sram(t, groups, signatures, out)
    counts: dict[str, int] = defaultdict(int)
    for v in out:
        counts[v.rule] += 1
    return TablesReport(source, tuple(_kept(out)), dict(counts), len(t.phases), len(t.flows),
                        len(t.streams), max((e for _, e, _ in t.phases.values()), default=0.0),
                        sram, t.sram_limit, replayed)


def check_fred_dir(directory: str | Path) -> TablesReport:
    """:func:`check_fred_tables` of the files in ``directory`` (:func:`read_fred_tables`)."""
    return check_fred_tables(read_fred_tables(directory), source=str(directory))
