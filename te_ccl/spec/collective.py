"""Load a collective from a YAML file and/or inline flags into a :class:`Collective`.

File format (every key optional except ``collective`` and ``size``; flags override)::

    collective: allgather        # allgather alltoall reducescatter allreduce broadcast
                                 # reduce gather scatter custom
    size: 1GB                    # nccl-tests convention, see te_ccl.collective.model
    chunks: 2                    # chunks per rank (pieces of the buffer per rank)
    ranks: all                   # or [0, 1, 2] or "0-7,12" or GPU names
    root: 0                      # broadcast / reduce / gather / scatter (default: first rank)
    inplace: false
    proto: Simple                # Simple | LL | LL128
    demands:                     # custom only: who needs what
      - {source: 0, destinations: "1-3", chunks: 1}

Flag names are those of ``teccl compile``: ``collective``, ``size``, ``chunks``,
``ranks``, ``root``, ``inplace``, ``proto`` (None means "not given"). Flag errors name
the flag (``--size``) instead of a file.

>>> from te_ccl.spec.topology import load_topology
>>> c = load_collective(load_topology("dgx1"), None, collective="allgather", size="1MB")
>>> c.kind.value, c.ranks, c.chunk_bytes
('allgather', (0, 1, 2, 3, 4, 5, 6, 7), 125000)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from te_ccl.collective.model import ROOTED, Collective, CollectiveKind, CustomDemand
from te_ccl.errors import SpecError
from te_ccl.spec.fields import Fields, as_bool, as_list, as_str, parse_size, positive_int
from te_ccl.spec.yamlio import read_yaml
from te_ccl.topology.model import Topology

__all__ = ["load_collective", "parse_ranks"]

_FLAGS = ("collective", "size", "chunks", "ranks", "root", "inplace", "proto")
_PROTOS = {"simple": "Simple", "ll": "LL", "ll128": "LL128"}


def _one_rank(topology: Topology, item: Any) -> list[int]:
    """Ranks named by one list item: an int, a GPU name, or a range string ``"0-7"``."""
    if isinstance(item, bool):
        raise TypeError("expected a rank, got a boolean")
    if isinstance(item, int):
        ranks = [item]
    elif isinstance(item, str) and item in topology.node_by_name:
        if not topology.node(item).is_gpu:
            raise ValueError(f"{item!r} is a switch, not a GPU")
        return [topology.rank(item)]
    elif isinstance(item, str):
        lo, dash, hi = item.strip().partition("-")
        if not lo.strip().isdigit() or (dash and not hi.strip().isdigit()):
            raise ValueError(f"expected a rank, a GPU name or a range like 0-7, got {item!r}")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ValueError(f"empty range {item!r}")
        ranks = [first, last] if last >= topology.ngpus else list(range(first, last + 1))
    else:
        raise TypeError(f"expected a rank, a GPU name or a range like 0-7, got {item!r}")
    for r in ranks:
        if not 0 <= r < topology.ngpus:
            raise ValueError(f"rank {r} is not in the topology (ranks 0-{topology.ngpus - 1})")
    return ranks


def parse_ranks(topology: Topology, value: Any) -> tuple[int, ...]:
    """Ranks from ``"all"``, a list, an int, or a comma-separated string of ranks/ranges.

    >>> from te_ccl.spec.topology import load_topology
    >>> parse_ranks(load_topology("dgx1"), "0-2,g5")
    (0, 1, 2, 5)
    """
    if value == "all":
        return tuple(range(topology.ngpus))
    if isinstance(value, str):
        items: list = [s for s in value.split(",") if s.strip()]
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    else:
        items = as_list(value)
    ranks = [r for item in items for r in _one_rank(topology, item)]
    if not ranks:
        raise ValueError("expected at least one rank")
    dup = sorted(r for r, n in Counter(ranks).items() if n > 1)
    if dup:
        raise ValueError(f"rank {dup[0]} is listed twice")
    return tuple(ranks)


def _single_rank(topology: Topology):
    def convert(value: Any) -> int:
        ranks = _one_rank(topology, value)
        if len(ranks) != 1:
            raise ValueError(f"expected one rank, got {value!r}")
        return ranks[0]
    return convert


def _kind(value: Any) -> CollectiveKind:
    name = as_str(value).lower().replace("_", "").replace("-", "")
    try:
        return CollectiveKind(name)
    except ValueError:
        kinds = ", ".join(k.value for k in CollectiveKind)
        raise ValueError(f"expected one of: {kinds}; got {value!r}") from None


def _proto(value: Any) -> str:
    name = as_str(value)
    if name.lower() not in _PROTOS:
        raise ValueError(f"expected Simple, LL or LL128, got {name!r}")
    return _PROTOS[name.lower()]


def _demands(f: Fields, topology: Topology, ranks: tuple[int, ...]) -> tuple[CustomDemand, ...]:
    out, members = [], set(ranks)
    for path, item, line in f.items("demands"):
        d = Fields.of(item, f.file, path, line=line)
        d.check(required=("source", "destinations"), optional=("chunks",))
        source = d.get("source", _single_rank(topology))
        dests = d.get("destinations", lambda v: parse_ranks(topology, v))
        for r in (source, *dests):
            if r not in members:
                raise d.error("destinations" if r != source else "source",
                              f"rank {r} is not one of the collective's ranks")
        if not [r for r in dests if r != source]:
            raise d.error("destinations", "expected at least one rank other than the source")
        out.append(CustomDemand(source, dests, d.get("chunks", positive_int, 1)))
    if not out:
        raise f.error("demands", "expected at least one demand")
    return tuple(out)


class _Source:
    """Each key from its flag (``--key``) if given, else from the file; errors name the one used."""

    def __init__(self, file_fields: Fields, flags: dict[str, Any]) -> None:
        self.file = file_fields
        self.flags = Fields({f"--{k}": v for k, v in flags.items() if v is not None}, None)

    def _where(self, key: str) -> tuple[Fields, str]:
        flag = f"--{key}"
        return (self.flags, flag) if self.flags.has(flag) else (self.file, key)

    def has(self, key: str) -> bool:
        return self.flags.has(f"--{key}") or self.file.has(key)

    def get(self, key: str, convert, default: Any = None) -> Any:
        fields, name = self._where(key)
        return fields.get(name, convert, default)

    def error(self, key: str, message: str) -> SpecError:
        fields, name = self._where(key)
        return fields.error(name, message)


def load_collective(topology: Topology, spec_path: str | None, **flag_overrides: Any) -> Collective:
    """The collective described by the YAML file ``spec_path`` and/or the flags.

    Raises
    ------
    SpecError
        Naming the file and key (or the flag) and what was expected.
    """
    unknown = set(flag_overrides) - set(_FLAGS)
    if unknown:
        raise TypeError(f"load_collective: unknown flag(s) {sorted(unknown)}")
    if spec_path is not None:
        data = read_yaml(spec_path)
        f = Fields.of(data, str(spec_path), expect="a collective mapping (collective, size, …)")
        f.check(optional=_FLAGS + ("demands", "description"))
    else:
        f = Fields({}, None)
    src = _Source(f, flag_overrides)
    return _build(src, topology)


def _build(src: _Source, topology: Topology) -> Collective:
    for key in ("collective", "size"):
        if not src.has(key):
            raise (src.file.error(key, "missing key") if src.file.file
                   else SpecError("missing; give it in a spec file or as a flag", key=f"--{key}"))
    kind = src.get("collective", _kind)
    ranks = src.get("ranks", lambda v: parse_ranks(topology, v), tuple(range(topology.ngpus)))
    if src.has("root") and kind not in ROOTED:
        raise src.error("root", f"{kind.value} has no root")
    root = src.get("root", _single_rank(topology)) if src.has("root") else None
    if kind in ROOTED and root is None:
        root = ranks[0]  # the communicator's rank 0, as nccl-tests and NCCL users assume
    if root is not None and root not in ranks:
        raise src.error("root", f"root {root} is not one of the ranks {list(ranks)}")
    if kind is CollectiveKind.CUSTOM and not src.file.has("demands"):
        raise src.error("demands", "missing key; a custom collective needs demands")
    if kind is not CollectiveKind.CUSTOM and src.file.has("demands"):
        raise src.error("demands", "only a custom collective takes demands")
    demands = _demands(src.file, topology, ranks) if kind is CollectiveKind.CUSTOM else ()
    if len(ranks) < 2 and kind is not CollectiveKind.CUSTOM:
        raise src.error("ranks", "expected at least 2 ranks")
    c = Collective(kind, src.get("size", parse_size), ranks,
                   chunks_per_rank=src.get("chunks", positive_int, 1), root=root,
                   inplace=src.get("inplace", as_bool, False),
                   proto=src.get("proto", _proto, "Simple"), demands=demands)
    return c
