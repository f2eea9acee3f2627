"""One helper that reads a YAML mapping field by field and explains every mistake.

:class:`Fields` wraps a mapping loaded by :mod:`te_ccl.spec.yamlio` together with the
file it came from and its path inside the document (``links[3]``). Its checks —
unknown keys, missing keys, wrong types, bad units — raise :class:`SpecError` with
one line: ``file:line: key.path: what was expected``. Both loaders use only this, so
the wording of errors is the same everywhere.

Converters are plain functions ``value -> result`` that raise ``ValueError`` or
``TypeError`` with what they expected; :meth:`Fields.get` adds the location.

>>> f = Fields.of({"bandwidth": "50GB/s", "count": 2}, "t.yaml", "links[0]")
>>> f.check(required=("bandwidth",), optional=("count",))
>>> f.get("bandwidth", parse_bandwidth), f.get("count", positive_int)
(50000000000.0, 2)
>>> f.get("latency", parse_time)
Traceback (most recent call last):
...
te_ccl.errors.SpecError: t.yaml: links[0].latency: missing key
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from te_ccl.errors import SpecError
from te_ccl.units import parse_bandwidth, parse_size, parse_time

__all__ = [
    "Fields", "MISSING", "as_bool", "as_str", "as_name", "as_int", "as_list", "positive_int",
    "parse_bandwidth", "parse_size", "parse_time",
]

T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def _kind(value: Any) -> str:
    for base, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                       (str, "a string"), (dict, "a mapping"), (list, "a list")):
        if isinstance(value, base):
            return name
    return "nothing" if value is None else type(value).__name__


def as_str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {_kind(value)}")
    return value


def as_name(value: Any) -> str:
    """A node name: a non-empty string or an integer (turned into a string)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"expected a node name (string), got {_kind(value)}")
    return value


def as_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {_kind(value)}")
    return value


def as_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {_kind(value)}")
    return value


def positive_int(value: Any) -> int:
    n = as_int(value)
    if n < 1:
        raise ValueError(f"expected an integer >= 1, got {n}")
    return n


def as_list(value: Any) -> list:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {_kind(value)}")
    return value


class Fields:
    """A YAML mapping being validated; see the module docstring."""

    def __init__(self, data: dict, file: str | None, where: str = "") -> None:
        self.data = data
        self.file = file
        self.where = where

    @classmethod
    def of(cls, value: Any, file: str | None, where: str = "", *,
           line: int | None = None, expect: str = "a mapping of keys to values") -> Fields:
        """Wrap ``value``, which must be a mapping; ``where`` is its path in the document."""
        if not isinstance(value, dict):
            raise SpecError(f"expected {expect}, got {_kind(value)}", file=file,
                            key=where or None, line=line or getattr(value, "line", None))
        return cls(value, file, where)

    def path(self, key: Any) -> str:
        return f"{self.where}.{key}" if self.where else str(key)

    def line(self, key: Any = None) -> int | None:
        if key is not None and hasattr(self.data, "line_of"):
            return self.data.line_of(key)
        return getattr(self.data, "line", None)

    def error(self, key: Any, message: str) -> SpecError:
        """A SpecError located at ``key`` of this mapping (or the mapping itself if None)."""
        name = self.path(key) if key is not None else (self.where or None)
        return SpecError(message, file=self.file, key=name, line=self.line(key))

    def check(self, required: Iterable[str] = (), optional: Iterable[str] = ()) -> None:
        """Refuse keys outside ``required`` ∪ ``optional`` and report missing required keys."""
        required, optional = tuple(required), tuple(optional)
        allowed = required + optional
        for key in self.data:
            if key not in allowed:
                raise self.error(key, f"unknown key; expected one of: {', '.join(allowed)}")
        for key in required:
            if key not in self.data:
                raise self.error(key, "missing key")

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, convert: Callable[[Any], T], default: Any = MISSING) -> T:
        """``convert(self[key])``, or ``default`` when absent; conversion errors are located."""
        if key not in self.data:
            if default is MISSING:
                raise self.error(key, "missing key")
            return default
        return self.convert(key, self.data[key], convert)

    def convert(self, key: Any, value: Any, convert: Callable[[Any], T]) -> T:
        """Apply ``convert`` to ``value`` found at ``key``, locating any ValueError/TypeError."""
        try:
            return convert(value)
        except (ValueError, TypeError) as e:
            raise self.error(key, str(e)) from None

    def sub(self, key: str, *, expect: str = "a mapping of keys to values") -> Fields:
        """The nested mapping at ``key`` (must be present)."""
        if key not in self.data:
            raise self.error(key, "missing key")
        return Fields.of(self.data[key], self.file, self.path(key), line=self.line(key),
                         expect=expect)

    def items(self, key: str, default: Any = MISSING) -> list[tuple[str, Any, int | None]]:
        """``(path, item, line)`` for each item of the list at ``key``."""
        values = self.get(key, as_list, default)
        lines = getattr(values, "line_of", lambda i: self.line(key))
        return [(f"{self.path(key)}[{i}]", v, lines(i)) for i, v in enumerate(values)]
