"""The ``GRID.yaml`` of ``teccl sweep``: which algorithms a library needs, as a product of axes.

Format (only ``topologies``, ``collectives`` and ``sizes`` are required)::

    name: lib                    # prefix of algorithm names (default: the file's stem)
    topologies: [ring8, my.yaml] # shipped names, or paths relative to this file
    collectives:                 # kinds, or mappings with the collective's own keys
      - allgather
      - {collective: broadcast, root: 0}
    sizes:                       # message-size ranges [min, max), each compiled at `at` (required)
      - {max: 64KB, at: 32KB}    # min defaults to 0
      - {min: 64KB, max: 16MB, at: 1MB}
      - {min: 16MB, at: 64MB}    # no max: no upper limit
    # or breakpoints: sizes: [32KB, 1MB, 64MB] — each serves from itself up to the next
    # (the first from 0, the last without a limit)
    chunks: [1, 2]               # chunks per rank         (one value or a list; default 1)
    inplace: [false, true]       #                          (default false)
    proto: Simple                # Simple | LL | LL128      (default Simple)
    backend: auto                # auto | milp | lp | rounds (default auto)
    time_limit: 60s              # per point: the solver's budget (default 60s; at most ~24.8 days)
    max_horizon: 40              # largest finish epoch to try (default automatic)
    epoch: fastest               # fastest | slowest | a time such as 1us
    seed: 0                      # 0 .. 2^31 - 1

Every list-valued key is an axis; the points are their product (see
:mod:`te_ccl.sweep.points`). Size ranges are half-open like the shipped MSCCL
libraries (``maxBytes`` = max − 1) and must not overlap, so the runtime finds exactly
one algorithm per size. All errors are :class:`~te_ccl.errors.SpecError` from
:class:`~te_ccl.spec.fields.Fields`: ``grid.yaml:7: sizes[1].at: …``.

>>> from te_ccl.spec.yamlio import parse_yaml
>>> g = grid_from_data(parse_yaml("topologies: [ring8]\\ncollectives: [allgather]\\n"
...                               "sizes: [32KB, 1MB]\\nchunks: [1, 2]\\n", "g.yaml"), "g.yaml")
>>> [(s.min_bytes, s.max_bytes, s.at_bytes) for s in g.sizes], g.chunks
([(0, 1000000, 32000), (1000000, None, 1000000)], (1, 2))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from te_ccl.backends.base import BACKENDS, MAX_SEED, MAX_TIME_LIMIT_S
from te_ccl.errors import SpecError
from te_ccl.spec.fields import (
    Fields,
    as_bool,
    as_int,
    as_name,
    as_str,
    parse_size,
    parse_time,
    positive_int,
)
from te_ccl.spec.yamlio import read_yaml
from te_ccl.units import format_size

__all__ = ["SizeRange", "CollectiveEntry", "Grid", "load_grid", "grid_from_data"]

T = TypeVar("T")
_KEYS = ("name", "topologies", "collectives", "sizes", "chunks", "inplace", "proto", "backend",
         "time_limit", "max_horizon", "epoch", "seed")
_COLLECTIVE_KEYS = ("collective", "root", "ranks")
_PROTOS = ("Simple", "LL", "LL128")


@dataclass(frozen=True)
class SizeRange:
    """Messages of ``[min_bytes, max_bytes)`` (None: no limit) served by a compile at ``at_bytes``."""

    min_bytes: int
    max_bytes: int | None
    at_bytes: int
    key: str = "sizes"

    @property
    def xml_bounds(self) -> tuple[int, int]:
        """MSCCL's inclusive ``(minBytes, maxBytes)``; ``maxBytes=0`` means no limit."""
        return self.min_bytes, (self.max_bytes - 1 if self.max_bytes is not None else 0)

    @property
    def label(self) -> str:
        """``0-64KiB`` or ``16MiB+``: a file-name-safe name of the range."""
        low = _size_label(self.min_bytes) if self.min_bytes else "0"
        return f"{low}+" if self.max_bytes is None else f"{low}-{_size_label(self.max_bytes)}"


def _size_label(n_bytes: int) -> str:
    """Decimal units when exact (``16MB``, as users write them), else :func:`format_size`."""
    for scale, unit in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "KB")):
        if n_bytes % scale == 0:
            return f"{n_bytes // scale}{unit}"
    return format_size(n_bytes)


@dataclass(frozen=True)
class CollectiveEntry:
    """One item of ``collectives``: a kind plus optional root and ranks; ``key`` locates it."""

    kind: str
    root: str | None = None
    ranks: str | None = None
    key: str = "collectives"


@dataclass(frozen=True)
class Grid:
    """A validated grid; the axes are tuples in file order, which fixes the point order."""

    file: str
    name: str
    topologies: tuple[str, ...]
    collectives: tuple[CollectiveEntry, ...]
    sizes: tuple[SizeRange, ...]
    chunks: tuple[int, ...] = (1,)
    inplace: tuple[bool, ...] = (False,)
    protos: tuple[str, ...] = ("Simple",)
    backends: tuple[str, ...] = ("auto",)
    time_limit_s: float = 60.0
    max_horizon: int | None = None
    epoch: str | float = "fastest"
    seed: int = 0

    @property
    def base_dir(self) -> Path:
        """Directory that relative topology paths are read from."""
        return Path(self.file).parent


def load_grid(path: str | Path) -> Grid:
    """Read and validate ``GRID.yaml``; raises SpecError naming file, line and key."""
    file = str(path)
    return grid_from_data(read_yaml(file), file)


def grid_from_data(data: Any, file: str) -> Grid:
    """Validate an already parsed grid (``file`` names it in errors)."""
    f = Fields.of(data, file, expect="a sweep grid mapping (topologies, collectives, sizes, …)")
    f.check(required=("topologies", "collectives", "sizes"), optional=_KEYS)
    return Grid(
        file=file,
        name=f.get("name", _file_safe, Path(file).stem),
        topologies=tuple(_axis(f, "topologies", as_str, None)),
        collectives=tuple(_collectives(f)),
        sizes=tuple(_sizes(f)),
        chunks=tuple(_axis(f, "chunks", positive_int, [1])),
        inplace=tuple(_axis(f, "inplace", as_bool, [False])),
        protos=tuple(_axis(f, "proto", _proto, ["Simple"])),
        backends=tuple(_axis(f, "backend", _backend, ["auto"])),
        time_limit_s=f.get("time_limit", _time_limit, 60.0),
        max_horizon=f.get("max_horizon", positive_int, None),
        epoch=f.get("epoch", _epoch, "fastest"),
        seed=f.get("seed", _seed, 0),
    )


def _axis(f: Fields, key: str, convert: Callable[[Any], T], default: list[T] | None) -> list[T]:
    """One value or a non-empty list of distinct values, each converted and located."""
    if not f.has(key):
        if default is None:
            raise f.error(key, "missing key")
        return default
    raw = f.data[key]
    if not isinstance(raw, list):
        return [f.convert(key, raw, convert)]
    if not raw:
        raise f.error(key, "expected at least one value")
    values = [_item(f, path, item, line, convert) for path, item, line in f.items(key)]
    for i, v in enumerate(values):
        if v in values[:i]:
            raise f.error(f"{key}[{i}]", f"{v!r} is listed twice")
    return values


def _collectives(f: Fields) -> list[CollectiveEntry]:
    out = []
    raw = f.data["collectives"]
    items = f.items("collectives") if isinstance(raw, list) else [("collectives", raw, None)]
    if not items:
        raise f.error("collectives", "expected at least one collective")
    for path, item, line in items:
        if isinstance(item, str):
            out.append(CollectiveEntry(item, key=path))
            continue
        c = Fields.of(item, f.file, path, line=line,
                      expect="a collective kind or a mapping {collective, root, ranks}")
        c.check(required=("collective",), optional=_COLLECTIVE_KEYS[1:])
        out.append(CollectiveEntry(c.get("collective", as_str),
                                   c.get("root", _text, None), c.get("ranks", _text, None),
                                   key=path))
    return out


def _sizes(f: Fields) -> list[SizeRange]:
    raw = f.data["sizes"]
    items = f.items("sizes") if isinstance(raw, list) else [("sizes", raw, None)]
    if not items:
        raise f.error("sizes", "expected at least one size or size range")
    mappings = [isinstance(item, dict) for _, item, _ in items]
    if any(mappings) and not all(mappings):
        raise f.error("sizes", "expected either all sizes (breakpoints) or all ranges {min, max, at}")
    ranges = [_range(f, path, item, line) for path, item, line in items] if all(mappings) \
        else _breakpoints(f, items)
    ordered = sorted(ranges, key=lambda r: r.min_bytes)
    for low, high in zip(ordered, ordered[1:], strict=False):
        if low.max_bytes is None or low.max_bytes > high.min_bytes:
            raise f.error(high.key, f"range overlaps {low.key} ({low.label}); the runtime "
                                    "must find one algorithm per size")
    return ranges


def _range(f: Fields, path: str, item: Any, line: int | None) -> SizeRange:
    r = Fields.of(item, f.file, path, line=line)
    r.check(required=("at",), optional=("min", "max"))
    low = r.get("min", _size_or_zero, 0)
    high = r.get("max", parse_size, None)
    if high is not None and high <= low:
        raise r.error("max", f"expected more than min ({format_size(low)})")
    at = r.get("at", parse_size)
    if at < low or (high is not None and at >= high):
        raise r.error("at", f"{format_size(at)} is outside the range [min, max)")
    return SizeRange(low, high, at, key=path)


def _breakpoints(f: Fields, items: list[tuple[str, Any, int | None]]) -> list[SizeRange]:
    sizes = [_item(f, path, item, line, parse_size) for path, item, line in items]
    for i in range(1, len(sizes)):
        if sizes[i] <= sizes[i - 1]:
            raise f.error(f"sizes[{i}]", "expected breakpoints in increasing order")
    ends = [*sizes[1:], None]
    return [SizeRange(0 if i == 0 else s, end, s, key=f"sizes[{i}]")
            for i, (s, end) in enumerate(zip(sizes, ends, strict=True))]


def _item(f: Fields, path: str, item: Any, line: int | None, convert: Callable[[Any], T]) -> T:
    """``convert(item)`` for a list item, errors located at ``path`` and the item's line."""
    try:
        return convert(item)
    except (ValueError, TypeError) as e:
        raise SpecError(str(e), file=f.file, key=path, line=line) from None


def _size_or_zero(value: Any) -> int:
    return 0 if value == 0 else parse_size(value)


def _text(value: Any) -> str:
    """A root or ranks value kept as text for ``load_collective`` (``0``, ``"0-3"``, ``[0, 2]``)."""
    if isinstance(value, list):
        return ",".join(as_name(v) for v in value)
    return as_name(value)


def _file_safe(value: Any) -> str:
    name = as_str(value)
    if not all(ch.isalnum() or ch in "-_." for ch in name):
        raise ValueError(f"expected letters, digits, '-', '_' or '.', got {name!r}")
    return name


def _proto(value: Any) -> str:
    name = as_str(value)
    for proto in _PROTOS:
        if proto.lower() == name.lower():
            return proto
    raise ValueError(f"expected Simple, LL or LL128, got {name!r}")


def _backend(value: Any) -> str:
    name = as_str(value)
    if name not in BACKENDS:
        raise ValueError(f"expected one of {', '.join(BACKENDS)}, got {name!r}")
    return name


def _time_limit(value: Any) -> float:
    seconds = float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else parse_time(value)
    if not 0 < seconds <= MAX_TIME_LIMIT_S:
        raise ValueError(f"expected a positive time limit of at most {MAX_TIME_LIMIT_S:.0f} s "
                         f"(7 days), got {value!r}")
    return seconds


def _seed(value: Any) -> int:
    seed = as_int(value)
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"expected an integer 0..{MAX_SEED}, got {seed}")
    return seed


def _epoch(value: Any) -> str | float:
    if value in ("fastest", "slowest"):
        return value
    seconds = parse_time(value)
    if not seconds > 0:
        raise ValueError(f"expected fastest, slowest or a positive time, got {value!r}")
    return seconds
