"""Where teccl writes, and writing there so that a failure never clobbers anything.

The rules (docs/cli.md, "Output paths"): ``"-"`` means stdout. Every other output path
is checked before any work starts (:func:`check_output_file`, :func:`check_output_dir`)
and again when written, since the path may have changed meanwhile:

* an output file's directory must already exist and be writable (an empty temporary
  file is created there and removed, which is what the write will do); teccl creates no
  parent directories;
* an existing regular file is replaced atomically (:func:`write_atomic`); a directory,
  device, FIFO or socket is refused and left untouched;
* a symbolic link is refused, never followed: as root, following a link someone planted
  in a shared directory would write wherever they chose;
* an output directory may be created (:func:`make_output_dir`), as one new entry of an
  existing directory;
* a name taken from an input (a topology's ``name:``, a collective) enters a path only
  as one safe component (:func:`path_component`).

:func:`write_atomic` puts the data in a temporary file beside the target and renames it
over the target only when complete, so it never opens the target (a FIFO would block).
An interruption (Ctrl-C, SIGTERM) while the temporary file exists removes it before the
process ends, so nothing half-written is left beside the target either.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(d / "x.txt", "hello")
>>> (d / "x.txt").read_text()
'hello'
>>> oct((d / "x.txt").stat().st_mode & 0o777) == oct(0o666 & ~_umask())
True
>>> write_atomic(d / "new" / "x.txt", "hello")
Traceback (most recent call last):
...
te_ccl.errors.SpecError: .../new/x.txt: the directory .../new does not exist; create it first
"""

from __future__ import annotations

import io
import os
import re
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from te_ccl.errors import SpecError

__all__ = ["write_atomic", "check_output_file", "check_output_dir", "make_output_dir",
           "check_input_file", "path_component", "save_figure", "pyplot"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
_TEMP_NAME_BYTES = 64  # of the target's name in a temporary file's (stays within NAME_MAX)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def path_component(name: str) -> str:
    """``name`` (from an input: a topology's ``name:``, a collective, a switch) as one safe
    file-name component: letters, digits and ``. _ + -`` kept, anything else (``/``, ``\\``,
    spaces, control characters) becomes ``_``; never empty, never ``.`` or ``..``, never
    starting with ``.`` (hidden) or ``-`` (an option, or stdout).

    >>> path_component("../../out/escaped"), path_component(".."), path_component("")
    ('_._.._out_escaped', '_.', '_')
    >>> path_component("dgx1-allgather.xml")
    'dgx1-allgather.xml'
    """
    safe = _UNSAFE.sub("_", name)
    if safe[:1] in (".", "-"):
        safe = "_" + safe[1:]
    return safe or "_"


def _is_stdout(path: str | os.PathLike) -> bool:
    return os.fspath(path) == "-"


def _kind(mode: int) -> str:
    """What an entry that is not a directory or link is, for a message."""
    for test, kind in ((stat.S_ISREG, "a regular file"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def check_input_file(path: str | os.PathLike, *, limit: int | None = None) -> None:
    """Refuse, before opening it, an input that is not a regular file (a device is read
    without end, a FIFO blocks) or has more than ``limit`` bytes. What cannot be looked
    at, and a directory, are left to the reader's own message."""
    try:
        st_ = os.stat(path)
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(st_.st_mode) and not stat.S_ISDIR(st_.st_mode):
        raise SpecError(f"is {_kind(st_.st_mode)}; expected a regular file",
                        file=os.fspath(path))
    if limit is not None and st_.st_size > limit:
        raise SpecError(f"has {st_.st_size:,} bytes, more than the {limit:,} this input "
                        "may have", file=os.fspath(path))


def _lstat(path: Path, key: str | None) -> os.stat_result | None:
    """The entry at ``path`` itself (a link is not followed), None if there is none."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None  # a missing or non-directory parent is reported by _directory
    except OSError as e:
        raise SpecError(f"cannot look at it ({e.strerror or e})", file=str(path),
                        key=key) from None


def _check_entry(path: Path, key: str | None, *,
                 directory: bool = False) -> os.stat_result | None:
    """Refuse what is at ``path`` (left untouched) unless it is nothing or, as wanted, a
    regular file or a directory; a symbolic link is refused, never followed. Returns the
    entry's stat, None if there is none."""
    st = _lstat(path, key)
    if st is None:
        return None
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        raise SpecError("is a symbolic link; name its target instead (teccl does not follow "
                        "links it writes to)", file=str(path), key=key)
    if directory:
        if not stat.S_ISDIR(mode):
            raise SpecError(f"is {_kind(mode)}; expected a directory", file=str(path), key=key)
    elif stat.S_ISDIR(mode):
        raise SpecError("is a directory; expected a file name", file=str(path), key=key)
    elif not stat.S_ISREG(mode):
        raise SpecError(f"is {_kind(mode)}; expected a regular file or a new name (left "
                        "untouched)", file=str(path), key=key)
    return st


def _directory(directory: Path, target: Path, key: str | None) -> None:
    """Refuse ``target`` unless ``directory``, where it goes, exists (a link to a
    directory is fine here: only the entry written is never a link)."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise SpecError(f"the directory {directory} does not exist; create it first",
                        file=str(target), key=key) from None
    except NotADirectoryError:
        st = None
    except OSError as e:
        raise SpecError(f"cannot reach the directory {directory} ({e.strerror or e})",
                        file=str(target), key=key) from None
    if st is None or not stat.S_ISDIR(st.st_mode):
        blocker = next((p for p in (*reversed(directory.parents), directory)
                        if p.exists() and not p.is_dir()), directory)
        raise SpecError(f"{blocker} is not a directory", file=str(target), key=key)


def _writable(directory: Path, target: Path, key: str | None) -> None:
    """Refuse ``target`` unless a file can be created in ``directory``: tried, because
    permission bits do not say (root ignores them; a read-only mount does not)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".teccl-probe-", dir=directory)
    except OSError as e:
        raise SpecError(f"cannot write in {directory} ({e.strerror or e})",
                        file=str(target), key=key) from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(path: str | os.PathLike, key: str | None = None) -> None:
    """Refuse, before any work, a file output that could not be written or would replace
    something other than a regular file (the module doc's rules; ``key`` names the flag)."""
    if _is_stdout(path):
        return
    if os.fspath(path).endswith(os.sep):
        raise SpecError("names a directory; expected a file name", file=os.fspath(path),
                        key=key)
    target = Path(path)
    _check_entry(target, key)
    _directory(target.parent, target, key)
    _writable(target.parent, target, key)


def check_output_dir(path: str | os.PathLike, key: str | None = None) -> None:
    """Refuse, before any work, a directory output teccl could not create or write into:
    an existing directory (not a link to one) it can write in, or a new name in one."""
    if _is_stdout(path):
        raise SpecError("is stdout; expected a directory", file="-", key=key)
    target = Path(path)
    if _check_entry(target, key, directory=True) is not None:
        _writable(target, target, key)
        return
    _directory(target.parent, target, key)
    _writable(target.parent, target, key)


def make_output_dir(path: str | os.PathLike, key: str | None = None) -> Path:
    """The output directory ``path``, created if missing (one new entry of an existing
    directory, never its parents); checked again as :func:`check_output_dir` checks."""
    target = Path(path)
    try:
        os.mkdir(target)
    except FileExistsError:
        pass
    except OSError as e:
        check_output_dir(target, key)  # names the cause where it can (a missing parent)
        raise SpecError(f"cannot create the directory ({e.strerror or e})", file=str(target),
                        key=key) from None
    if _check_entry(target, key, directory=True) is None:  # removed since
        raise SpecError("vanished while being created", file=str(target), key=key)
    return target


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
    """Write ``data`` to ``path`` (into an existing directory) or to stdout for ``"-"``."""
    raw = data.encode() if isinstance(data, str) else data
    if _is_stdout(path):
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        return
    target = Path(path)
    _check_entry(target, None)
    _directory(target.parent, target, None)
    with _terminable():
        _write(target, raw)


def _write(target: Path, raw: bytes) -> None:
    tmp: str | None = None
    name = os.fsdecode(os.fsencode(target.name)[:_TEMP_NAME_BYTES])
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs are ordinary files
        _check_entry(target, None)  # again: it may have become a link or a FIFO meanwhile
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
