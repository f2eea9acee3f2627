"""Read the tables nccl-tests prints (``all_reduce_perf``, ``all_gather_perf``, …).

The output starts with ``#`` lines — settings, one ``#  Rank  N … device`` line per
rank, then a header naming the columns, e.g.::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
         1048576        262144     float     sum      -1    25.31   41.43   72.50      0    24.90   42.11   73.70      0

The first ``time``/``algbw``/``busbw`` group is out-of-place, the second in-place
(which may read ``N/A``). Older versions call ``#wrong`` ``error`` and omit ``root``
or ``redop``; columns are found by name, so all of them read. Each row gives up to two
samples (out-of-place and in-place); rows that failed validation are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from te_ccl.errors import SpecError

__all__ = ["Sample", "Table", "parse_nccl_tests", "read_nccl_tests", "COLLECTIVES"]

# canonical collective -> spellings in binary names and "Collective test starting" lines
COLLECTIVES = {"allreduce": ("all_reduce", "allreduce"), "allgather": ("all_gather", "allgather"),
               "reducescatter": ("reduce_scatter", "reducescatter"),
               "alltoall": ("alltoall", "all_to_all"), "sendrecv": ("sendrecv", "send_recv")}
_RANK_RE = re.compile(r"^#\s*Rank\s+\d+\s")
_NRANKS_RE = re.compile(r"nGpus\s+(\d+)")


@dataclass(frozen=True)
class Sample:
    size_bytes: int
    time_s: float
    line: int
    inplace: bool


@dataclass
class Table:
    """Samples of one nccl-tests run, how many ranks it ran on, and rows skipped."""

    file: str
    collective: str | None
    nranks: int | None
    samples: list[Sample] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _collective_named(text: str) -> str | None:
    low = text.lower()
    for kind, names in COLLECTIVES.items():
        if any(n in low for n in names):
            return kind
    return None


def _number(tok: str, what: str, file: str, line: int) -> float | None:
    if tok.upper() == "N/A":
        return None
    try:
        return float(tok)
    except ValueError:
        raise SpecError(f"column {what}: expected a number, got {tok!r}", file=file,
                        line=line) from None


def parse_nccl_tests(text: str, file: str) -> Table:
    """Samples of the nccl-tests output ``text`` read from ``file``."""
    lines = text.splitlines()
    header_at = next((i for i, ln in enumerate(lines) if ln.startswith("#")
                      and "size" in ln.split() and "time" in ln.split()), None)
    if header_at is None:
        raise SpecError("no nccl-tests header (a '#' line naming size … time algbw busbw); "
                        "expected the output of all_reduce_perf, all_gather_perf, "
                        "sendrecv_perf or alltoall_perf", file=file, line=1)
    cols = lines[header_at].lstrip("#").split()
    size_at = cols.index("size")
    times = [i for i, c in enumerate(cols) if c == "time"]
    wrong = [i for i, c in enumerate(cols) if c in ("#wrong", "error")]
    started = next((ln for ln in lines if "test starting" in ln.lower()), "")
    nranks = sum(1 for ln in lines[:header_at] if _RANK_RE.match(ln)) or None
    if nranks is None:
        m = _NRANKS_RE.search("\n".join(lines[:header_at]))
        nranks = int(m.group(1)) if m else None
    table = Table(file, _collective_named(started) or _collective_named(Path(file).name), nranks)
    for i in range(header_at + 1, len(lines)):
        toks = lines[i].split()
        if not toks or lines[i].lstrip().startswith("#"):
            continue
        if len(toks) != len(cols):
            raise SpecError(f"row has {len(toks)} columns, expected {len(cols)} as in the "
                            f"header at line {header_at + 1}", file=file, line=i + 1)
        size = _number(toks[size_at], "size", file, i + 1)
        if size is None or size <= 0 or size != int(size):
            continue  # zero-byte rows carry no bandwidth information
        for k, t in enumerate(times):
            bad = wrong[k] if k < len(wrong) else None
            if bad is not None and toks[bad].upper() != "N/A" and \
                    (_number(toks[bad], cols[bad], file, i + 1) or 0) != 0:
                table.skipped.append(f"line {i + 1}: {toks[bad]} wrong values")
                continue
            value = _number(toks[t], "time", file, i + 1)
            if value is None:
                continue
            if value <= 0:
                raise SpecError(f"column time: expected a positive time in us, got {toks[t]!r}",
                                file=file, line=i + 1)
            table.samples.append(Sample(int(size), value * 1e-6, i + 1, inplace=k == 1))
    if not table.samples:
        raise SpecError("no measurements (rows of size, time …) under the header; expected "
                        "at least one row with a positive size", file=file, line=header_at + 1)
    return table


def read_nccl_tests(path: str | Path) -> Table:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError("not UTF-8 text; expected nccl-tests output", file=str(path)) from None
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror or 'no such file'}", file=str(path)) from None
    return parse_nccl_tests(text, str(path))
