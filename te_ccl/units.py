"""Quantities with units: sizes, bandwidths and times, parsed to bytes, bytes/s and seconds.

Decimal prefixes are powers of ten (``1GB`` = 10**9 bytes), binary ones powers of two
(``1GiB`` = 2**30 bytes), as in nccl-tests and the papers we compare with. Bits are
written with a lowercase ``b`` (``100Gbps``, ``100Gb/s``).

>>> parse_size("64MiB")
67108864
>>> parse_bandwidth("50GB/s")
50000000000.0
>>> parse_bandwidth("100Gbps")
12500000000.0
>>> parse_time("0.7us")
7e-07
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException

__all__ = [
    "UnitError",
    "parse_size",
    "parse_bandwidth",
    "MIN_BANDWIDTH_BPS",
    "parse_time",
    "format_size",
    "format_bandwidth",
    "format_time",
]


class UnitError(ValueError):
    """A quantity could not be parsed; the message says what was expected."""


MAX_SIZE = 2**63 - 1  # bytes: the runtime's size fields are 64-bit
_PREFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_SIZE_RE = re.compile(_NUMBER + r"\s*(?P<prefix>[KMGTP]i?|k)?(?P<unit>B|b|bit|bytes?)?$")
_BW_RE = re.compile(_NUMBER + r"\s*(?P<prefix>[KMGTP]i?|k)?(?P<unit>B/s|b/s|Bps|bps)$")
_TIME_RE = re.compile(_NUMBER + r"\s*(?P<unit>s|ms|us|µs|ns|ps)$")
_TIME_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "ps": 1e-12}


def _prefix(p: str | None) -> int:
    return _PREFIX[(p or "").replace("k", "K")]


def parse_size(text: str | int) -> int:
    """Bytes in ``text`` (``"1GB"``, ``"64MiB"``, ``"512"``); must be a positive whole number.

    The number is read exactly (decimal arithmetic), so ``1.0000001MB`` (1,000,000.1 bytes)
    is refused rather than truncated.
    """
    if isinstance(text, bool):
        raise UnitError(f"expected a size such as 1GB or 64MiB, got {text!r}")
    if isinstance(text, int):
        value = Decimal(text)
    else:
        m = _SIZE_RE.match(str(text).strip())
        if not m:
            raise UnitError(f"expected a size such as 1GB or 64MiB, got {text!r}")
        try:
            value = Decimal(m["num"]) * _prefix(m["prefix"])
        except DecimalException:  # an exponent beyond decimal's range
            raise UnitError(f"expected a size such as 1GB or 64MiB, got {text!r}") from None
        if m["unit"] in ("b", "bit"):
            value /= 8
    if not value.is_finite() or value <= 0:
        raise UnitError(f"expected a positive size, got {text!r}")
    if value > MAX_SIZE:
        raise UnitError(f"expected at most {MAX_SIZE} bytes (8 EiB), got {text!r}")
    if value != value.to_integral_value():
        raise UnitError(f"expected a whole number of bytes, got {text!r} ({value.normalize():f} "
                        "bytes)")
    return int(value)


MIN_BANDWIDTH_BPS = 1.0  # slower is no link: its transfer times overflow the time model


def parse_bandwidth(text: str | int | float) -> float:
    """Bytes per second in ``text`` (``"50GB/s"``, ``"100Gbps"``); must be positive."""
    if isinstance(text, bool) or isinstance(text, int | float):
        raise UnitError(f"expected a bandwidth with a unit such as 50GB/s or 100Gbps, got {text!r}")
    m = _BW_RE.match(str(text).strip())
    if not m:
        raise UnitError(f"expected a bandwidth with a unit such as 50GB/s or 100Gbps, got {text!r}")
    value = float(m["num"]) * _prefix(m["prefix"])
    if m["unit"] in ("b/s", "bps"):
        value /= 8
    if not MIN_BANDWIDTH_BPS <= value < math.inf:
        raise UnitError(f"expected a positive bandwidth (finite, at least 1B/s), got {text!r}")
    return value


def parse_time(text: str | int | float) -> float:
    """Seconds in ``text`` (``"0.7us"``, ``"1.3 us"``, ``"2ms"``); ``0`` alone is allowed."""
    if isinstance(text, bool):
        raise UnitError(f"expected a time with a unit such as 0.7us, got {text!r}")
    if isinstance(text, int | float):
        if text == 0:
            return 0.0
        raise UnitError(f"expected a time with a unit such as 0.7us, got {text!r}")
    m = _TIME_RE.match(str(text).strip())
    if not m:
        raise UnitError(f"expected a time with a unit such as 0.7us or 2ms, got {text!r}")
    value = float(m["num"]) * _TIME_SCALE[m["unit"]]
    if value < 0 or not math.isfinite(value):
        raise UnitError(f"expected a non-negative time, got {text!r}")
    return value


def _scaled(value: float, steps: list[tuple[float, str]], suffix: str) -> str:
    for scale, name in steps:
        if abs(value) >= scale:
            return f"{value / scale:.4g}{name}{suffix}"
    return f"{value:.4g}{suffix}"


def format_size(n_bytes: float) -> str:
    """``1073741824`` → ``"1GiB"`` when exact in binary units, else decimal (``"1.5GB"``)."""
    for scale, name in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n_bytes >= scale and n_bytes % scale == 0:
            return f"{int(n_bytes // scale)}{name}"
    return _scaled(n_bytes, [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")], "B")


def format_bandwidth(bytes_per_s: float) -> str:
    return _scaled(bytes_per_s, [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")], "B/s")


def format_time(seconds: float) -> str:
    if seconds == 0:
        return "0s"
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.4g}{name}"
    return f"{seconds / 1e-12:.4g}ps"
