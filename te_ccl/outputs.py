"""Writing outputs so that a failure never leaves a half-written or truncated file.

Every file teccl writes goes through :func:`write_atomic`: the data lands in a temporary
file beside the target and is renamed over it only when complete. ``"-"`` means stdout.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(d / "a" / "x.txt", "hello")
>>> (d / "a" / "x.txt").read_text()
'hello'
>>> oct((d / "a" / "x.txt").stat().st_mode & 0o777) == oct(0o666 & ~_umask())
True
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from te_ccl.errors import SpecError

__all__ = ["write_atomic"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` to ``path`` (parents created) or to stdout for ``"-"``."""
    raw = data.encode() if isinstance(data, str) else data
    if str(path) == "-":
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        return
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as e:
        raise SpecError(f"cannot write here ({e.strerror})", file=str(target)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs are ordinary files
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
