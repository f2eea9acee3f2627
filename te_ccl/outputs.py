"""Writing outputs so that a failure never leaves a half-written or truncated file.

Every file teccl writes goes through :func:`write_atomic`: the data lands in a temporary
file beside the target and is renamed over it only when complete. ``"-"`` means stdout.
An interruption (Ctrl-C, SIGTERM) while the temporary file exists removes it before the
process ends, so nothing half-written is left beside the target either.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(d / "a" / "x.txt", "hello")
>>> (d / "a" / "x.txt").read_text()
'hello'
>>> oct((d / "a" / "x.txt").stat().st_mode & 0o777) == oct(0o666 & ~_umask())
True
"""

from __future__ import annotations

import io
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from te_ccl.errors import SpecError

__all__ = ["write_atomic", "check_output_file", "save_figure", "pyplot"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_output_file(path: str | os.PathLike, key: str | None = None) -> None:
    """Refuse, before any work, an output path that names a directory."""
    if str(path) != "-" and Path(path).is_dir():
        raise SpecError("is a directory; expected a file name", file=str(path), key=key)


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing without a display, or an error naming the extra that
    installs it (plotting is optional: ``pip install 'teccl[plot]'``)."""
    try:
        import matplotlib
    except ImportError:
        raise SpecError("drawing needs matplotlib: pip install 'teccl[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | os.PathLike, **savefig: Any) -> Path:
    """Render a matplotlib figure in memory in the format of ``path``'s suffix, close it,
    and write it with :func:`write_atomic` (so a bad path is one error, exit code 2)."""
    plt = pyplot()
    target = Path(path)
    fmt = target.suffix[1:].lower()
    formats = fig.canvas.get_supported_filetypes()
    try:
        if fmt not in formats:
            raise SpecError(f"unknown image format {target.suffix or '(none)'!r}; expected "
                            ".png, .svg or .pdf", file=str(target))
        check_output_file(target)
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, **savefig)
    finally:
        plt.close(fig)
    write_atomic(target, buffer.getvalue())
    return target


@contextmanager
def _terminable() -> Iterator[None]:
    """SIGTERM raises ``SystemExit(143)`` inside (so ``finally`` blocks run), where it
    would otherwise end the process on the spot; only where nobody else handles it."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` to ``path`` (parents created) or to stdout for ``"-"``."""
    raw = data.encode() if isinstance(data, str) else data
    if str(path) == "-":
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        return
    target = Path(path)
    check_output_file(target)
    with _terminable():
        _write(target, raw)


def _write(target: Path, raw: bytes) -> None:
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs are ordinary files
        os.replace(tmp, target)
    except OSError as e:
        _discard(tmp)
        raise SpecError(f"cannot write here ({e.strerror or e})", file=str(target)) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str | None) -> None:
    if tmp is not None:
        Path(tmp).unlink(missing_ok=True)
