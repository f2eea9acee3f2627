"""Output paths under attack: every command that writes refuses, before any work, an
output that is a device, FIFO, socket, symbolic link or directory (left untouched), or
whose directory is missing or not a directory; names taken from inputs never leave the
directory they are written to.

The commands run in-process with the solver, the baseline builder and the sweep driver
replaced by a tripwire: a check made after the work started would end in exit 70, not 2.
"""

from __future__ import annotations

import os
import socket
import stat
import string
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from te_ccl import outputs
from te_ccl.errors import SpecError
from te_ccl.outputs import (
    check_output_dir,
    check_output_file,
    make_output_dir,
    path_component,
    write_atomic,
)


def _snapshot(path: Path) -> tuple:
    """What must not change about an entry teccl refuses to write to."""
    st_ = os.lstat(path)
    target = os.readlink(path) if stat.S_ISLNK(st_.st_mode) else None
    return st_.st_ino, st_.st_mode, st_.st_rdev, st_.st_size, target


def _mknod(path: Path, kind: int, device: tuple[int, int]) -> None:
    try:
        os.mknod(path, kind | 0o600, os.makedev(*device))
    except PermissionError:
        pytest.skip("mknod is not permitted here (needs root or CAP_MKNOD)")


# ---- hostile entries, made in the test's own directory (the working directory) ----

def _chardev(d: Path) -> Path:
    _mknod(d / "full", stat.S_IFCHR, (1, 7))  # what /dev/full is
    return d / "full"


def _blockdev(d: Path) -> Path:
    _mknod(d / "loop", stat.S_IFBLK, (7, 0))
    return d / "loop"


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "fifo")
    return d / "fifo"


def _socket(d: Path) -> Path:
    # bound by a short relative name: a socket path is limited to about 100 bytes
    server = socket.socket(socket.AF_UNIX)
    server.bind("sock")
    server.close()  # the entry stays
    return d / "sock"


def _link_to_file(d: Path) -> Path:
    (d / "precious").write_text("keep me")
    (d / "link").symlink_to("precious")
    return d / "link"


def _dangling_link(d: Path) -> Path:
    (d / "dangling").symlink_to("nowhere/at/all")
    return d / "dangling"


def _link_to_device(d: Path) -> Path:
    _chardev(d)
    (d / "devlink").symlink_to("full")
    return d / "devlink"


def _directory(d: Path) -> Path:
    (d / "adir").mkdir()
    return d / "adir"


def _link_to_directory(d: Path) -> Path:
    (d / "real").mkdir()
    (d / "dirlink").symlink_to("real")
    return d / "dirlink"


def _regular_file(d: Path) -> Path:
    (d / "plain").write_text("keep me")
    return d / "plain"


Hazard = Callable[[Path], Path]
FILE_HAZARDS: dict[str, tuple[Hazard, str]] = {
    "character device": (_chardev, "is a character device"),
    "block device": (_blockdev, "is a block device"),
    "fifo": (_fifo, "is a FIFO"),
    "socket": (_socket, "is a socket"),
    "link to a file": (_link_to_file, "is a symbolic link"),
    "dangling link": (_dangling_link, "is a symbolic link"),
    "link to a device": (_link_to_device, "is a symbolic link"),
    "directory": (_directory, "is a directory"),
}
DIR_HAZARDS: dict[str, tuple[Hazard, str]] = {
    "link to a directory": (_link_to_directory, "is a symbolic link"),
    "dangling link": (_dangling_link, "is a symbolic link"),
    "regular file": (_regular_file, "is a regular file; expected a directory"),
    "fifo": (_fifo, "is a FIFO"),
    "character device": (_chardev, "is a character device"),
}


def _missing_parent(d: Path) -> tuple[Path, str]:
    return d / "missing" / "deeper" / "x.out", "does not exist; create it first"


def _file_as_parent(d: Path) -> tuple[Path, str]:
    (d / "afile").write_text("not a directory")
    return d / "afile" / "x.out", "afile is not a directory"


PARENT_HAZARDS = {"missing parent": _missing_parent, "parent is a file": _file_as_parent}


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_work(monkeypatch):
    """Solving, building a baseline, running a sweep and the FRED commands' work end the
    command with exit 70."""
    import te_ccl.baselines
    import te_ccl.cli.fred
    import te_ccl.compiler.best
    import te_ccl.compiler.pipeline
    import te_ccl.sweep.driver

    def tripwire(*args, **kwargs):
        raise RuntimeError("the work started before the output path was checked")

    for module in (te_ccl.compiler.pipeline, te_ccl.compiler.best):
        monkeypatch.setattr(module, "solve_best", tripwire)
    monkeypatch.setattr(te_ccl.baselines, "build_baseline", tripwire)
    monkeypatch.setattr(te_ccl.sweep.driver, "run_sweep", tripwire)
    for name in ("build_fred", "fabric", "in_switch_schedule", "load_workload"):
        monkeypatch.setattr(te_ccl.cli.fred, name, tripwire)


# ---- the library's checks ----

@pytest.mark.parametrize("name", FILE_HAZARDS)
def test_a_file_output_that_is_not_a_regular_file_is_refused_and_untouched(here, name):
    make, message = FILE_HAZARDS[name]
    path = make(here)
    before = _snapshot(path)
    with pytest.raises(SpecError, match=message):
        check_output_file(path, key="--output")
    with pytest.raises(SpecError, match=message):
        write_atomic(path, "data")
    assert _snapshot(path) == before
    assert not (here / "precious").exists() or (here / "precious").read_text() == "keep me"
    assert sorted(p.name for p in here.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("name", DIR_HAZARDS)
def test_a_directory_output_that_is_not_a_directory_is_refused_and_untouched(here, name):
    make, message = DIR_HAZARDS[name]
    path = make(here)
    before = _snapshot(path)
    for check in (check_output_dir, make_output_dir):
        with pytest.raises(SpecError, match=message):
            check(path, key="--tables")
    assert _snapshot(path) == before
    assert not (here / "real").exists() or list((here / "real").iterdir()) == []


@pytest.mark.parametrize("name", PARENT_HAZARDS)
def test_outputs_whose_directory_is_missing_or_a_file_are_refused_and_nothing_is_created(
        here, name):
    path, message = PARENT_HAZARDS[name](here)
    before = sorted(p.name for p in here.iterdir())
    for check in (check_output_file, write_atomic, check_output_dir, make_output_dir):
        with pytest.raises(SpecError, match=message):
            check(path, "data") if check is write_atomic else check(path)
    assert sorted(p.name for p in here.iterdir()) == before


def test_an_output_directory_is_created_as_one_new_entry_only(here):
    check_output_dir(here / "new")
    assert not (here / "new").exists()  # checking creates nothing
    assert make_output_dir(here / "new") == here / "new"
    assert (here / "new").is_dir() and make_output_dir(here / "new") == here / "new"
    with pytest.raises(SpecError, match="does not exist"):
        make_output_dir(here / "a" / "b")
    assert not (here / "a").exists()


def test_stdout_is_a_file_output_and_never_a_directory():
    check_output_file("-")
    with pytest.raises(SpecError, match="is stdout; expected a directory"):
        check_output_dir("-")


def test_a_name_with_a_trailing_slash_is_not_a_file(here):
    with pytest.raises(SpecError, match="names a directory"):
        check_output_file("new/")
    assert list(here.iterdir()) == []


def test_an_existing_regular_file_is_replaced_atomically(here):
    target = here / "out.xml"
    target.write_text("old")
    other = here / "hardlink"
    os.link(target, other)
    check_output_file(target)
    write_atomic(target, "new")
    assert target.read_text() == "new" and other.read_text() == "old"  # a new inode
    assert sorted(p.name for p in here.iterdir()) == ["hardlink", "out.xml"]


def test_a_parent_directory_reached_through_a_link_is_fine(here):
    (here / "real").mkdir()
    (here / "via").symlink_to("real")
    check_output_file(here / "via" / "x.xml")
    write_atomic(here / "via" / "x.xml", "data")
    assert (here / "real" / "x.xml").read_text() == "data"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits: a read-only "
                    "directory is writable to it (the parent-is-a-file cases cover root)")
def test_an_unwritable_directory_is_refused_before_any_work(here):
    locked = here / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(SpecError, match="cannot write in"):
            check_output_file(locked / "x.xml")
        with pytest.raises(SpecError, match="cannot write in"):
            check_output_dir(locked)
    finally:
        locked.chmod(0o700)


def test_a_name_longer_than_the_directory_allows_is_refused_before_any_work(here):
    with pytest.raises(SpecError, match="File name too long"):
        check_output_file(here / ("x" * 300 + ".xml"))
    check_output_file(here / ("x" * 250 + ".xml"))  # fits, with its temporary file's
    write_atomic(here / ("x" * 250 + ".xml"), "data")


def test_a_target_that_turns_into_a_fifo_while_written_is_refused_without_blocking(
        here, monkeypatch):
    """The race: checked as a new name, a FIFO appears before the rename. The write
    refuses it, never opens it (that would block) and leaves no temporary file."""
    target = here / "x.xml"
    check_output_file(target)
    real_chmod = os.chmod

    def chmod_then_plant(path, mode):
        real_chmod(path, mode)
        os.mkfifo(target)

    monkeypatch.setattr(outputs.os, "chmod", chmod_then_plant)
    failure: list[BaseException] = []

    def write() -> None:
        try:
            write_atomic(target, "data")
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            failure.append(e)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(timeout=60)  # a hang guard: opening the FIFO would block forever
    assert not thread.is_alive()
    assert isinstance(failure[0], SpecError) and "is a FIFO" in str(failure[0])
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert [p.name for p in here.iterdir()] == ["x.xml"]


_ANY_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)


@given(_ANY_TEXT)
def test_a_name_from_an_input_is_one_safe_path_component(name):
    safe = path_component(name)
    assert safe and safe not in (".", "..") and safe[0] not in ".-"
    assert set(safe) <= set(string.ascii_letters + string.digits + "._+-")
    base = Path("out")
    assert (base / safe).parent == base and (base / safe).name == safe


@given(st.text(string.ascii_letters + string.digits + "_+", min_size=1).map(
    lambda s: s + ".xml"))
def test_a_name_already_safe_is_kept(name):
    assert path_component(name) == name


# ---- every command that writes ----

# The command and the flag its error names. {out}: the hostile file path; {dir}: the
# hostile directory path; {ok}: a harmless output. Inputs named {missing} do not exist:
# the path check comes before reading them.
FILE_COMMANDS = {
    "compile -o": ("compile ring8 -c allgather -s 1MB -o {out}", "--output"),
    "baseline -o": ("baseline ring ring8 -c allgather -s 1MB -o {out}", "--output"),
    "baseline --timeline": ("baseline ring ring8 -c allgather -s 1MB -o {ok} "
                            "--timeline {out}", "--timeline"),
    "simulate --timeline": ("simulate ring8 {missing} --timeline {out}", "--timeline"),
    "verify --upgrade -o": ("verify {missing} --upgrade -o {out}", "--output"),
    "topo import -o": ("topo import {missing} -o {out}", "--output"),
    "topo calibrate -o": ("topo calibrate ring8 {missing} -o {out}", "--output"),
    "fred show --draw": ("fred show --draw {out}", "--draw"),
    "fred collective -o": ("fred collective fred-d -o {out}", "-o"),
    "fred evaluate --plot": ("fred evaluate -w resnet152 --plot {out}", "--plot"),
}
DIR_COMMANDS = {
    "compile --sizes -o": ("compile ring8 -c allgather --sizes 1KB..64KB -o {dir}",
                           "--output"),
    "compile --fred-tables": ("compile ring8 -c allgather -s 1MB -o {ok} --fred-tables {dir}",
                              "--fred-tables"),
    "fred route --tables": ("fred route --flow 0:1 --tables {dir}", "--tables"),
    "fred phase --tables": ("fred phase --tables {dir}", "--tables"),
    "fred collective --tables": ("fred collective fred-d --tables {dir}", "--tables"),
    "sweep -o": ("sweep {missing} -o {dir}", "--output"),
}


def _refused(teccl, command: tuple[str, str], here: Path, message: str,
             **paths: Path) -> None:
    """The command exits 2 with one line that names its flag and says ``message``."""
    template, flag = command
    names = {"ok": here / "ok.out", "missing": here / "no-such-input", **paths}
    code, _, err = teccl(*(part.format(**names) for part in template.split()))
    assert code == 2 and err.count("\n") == 1 and message in err and flag in err, err
    assert not (here / "ok.out").exists()


@pytest.mark.parametrize("hazard", FILE_HAZARDS)
@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_every_file_output_refuses_what_is_not_a_regular_file(teccl, here, no_work,
                                                              command, hazard):
    _refused_untouched(teccl, FILE_COMMANDS[command], here, FILE_HAZARDS[hazard], "out")


@pytest.mark.parametrize("hazard", DIR_HAZARDS)
@pytest.mark.parametrize("command", DIR_COMMANDS)
def test_every_directory_output_refuses_what_is_not_a_directory(teccl, here, no_work,
                                                                command, hazard):
    _refused_untouched(teccl, DIR_COMMANDS[command], here, DIR_HAZARDS[hazard], "dir")


def _refused_untouched(teccl, command: tuple[str, str], here: Path, hazard: tuple,
                       slot: str) -> None:
    """``command`` with the ``hazard`` made at its ``slot`` is refused, and what was
    there is left as it was."""
    make, message = hazard
    path = make(here)
    before = _snapshot(path)
    _refused(teccl, command, here, message, **{slot: path})
    assert _snapshot(path) == before


@pytest.mark.parametrize("parent", PARENT_HAZARDS)
@pytest.mark.parametrize("command", [*FILE_COMMANDS, *DIR_COMMANDS])
def test_every_output_refuses_a_missing_or_non_directory_parent(teccl, here, no_work,
                                                                command, parent):
    path, message = PARENT_HAZARDS[parent](here)
    before = sorted(p.name for p in here.iterdir())
    _refused(teccl, FILE_COMMANDS.get(command) or DIR_COMMANDS[command], here, message,
             out=path, dir=path)
    assert sorted(p.name for p in here.iterdir()) == before


# ---- names from inputs ----

TRAVERSING = """\
name: ../../escaped/x
gpus: [g0, g1]
links:
  - {between: [g0, g1], bandwidth: 50GB/s, latency: 1us}
"""


@pytest.fixture
def traversing(tmp_path, monkeypatch) -> Path:
    """A topology named ``../../escaped/x``, in a working directory two levels down."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    (work / "t.yaml").write_text(TRAVERSING)
    monkeypatch.chdir(work)
    return work


def _everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_topology_name_never_leaves_the_working_directory_of_compile(teccl, traversing,
                                                                       tmp_path):
    code, _, err = teccl("compile", "t.yaml", "-c", "allgather", "-s", "1MB")
    assert code == 0, err
    assert _everything(tmp_path) == ["a", "a/b", "a/b/_._.._escaped_x-allgather.xml",
                                     "a/b/t.yaml"]


def test_a_topology_name_never_leaves_the_working_directory_of_baseline(teccl, traversing,
                                                                        tmp_path):
    code, _, err = teccl("baseline", "ring", "t.yaml", "-c", "allgather", "-s", "1MB")
    assert code == 0, err
    assert _everything(tmp_path) == ["a", "a/b", "a/b/_._.._escaped_x-allgather-ring.xml",
                                     "a/b/t.yaml"]


def test_a_size_library_names_its_files_within_its_directory(teccl, traversing, tmp_path):
    code, _, err = teccl("compile", "t.yaml", "-c", "allgather", "--sizes", "1KB..4KB",
                         "-o", "lib")
    assert code == 0, err
    files = [p for p in (traversing / "lib").iterdir()]
    assert files and all(p.name.startswith("_._.._escaped_x-allgather-") for p in files)
    assert [p for p in _everything(tmp_path) if not p.startswith("a/b/lib/")] == \
        ["a", "a/b", "a/b/lib", "a/b/t.yaml"]


def test_a_topology_name_never_leaves_a_sweep_directory(teccl, traversing, tmp_path):
    (traversing / "grid.yaml").write_text(
        "topologies: [t.yaml]\ncollectives: [allgather]\nsizes: [1MB]\n")
    code, _, err = teccl("sweep", "grid.yaml", "-o", "results", "--workers", "1")
    assert code == 0, err
    outside = [p for p in _everything(tmp_path) if not p.startswith("a/b/results/")]
    assert outside == ["a", "a/b", "a/b/grid.yaml", "a/b/results", "a/b/t.yaml"]
    published = list((traversing / "results" / "msccl").iterdir())
    assert [p.name for p in published] == ["_._.._escaped_x"]


def test_two_topology_names_that_make_one_directory_name_are_refused(teccl, here):
    for i, name in enumerate(("a/b", "a_b")):
        (here / f"t{i}.yaml").write_text(TRAVERSING.replace("../../escaped/x", name))
    (here / "grid.yaml").write_text(
        "topologies: [t0.yaml, t1.yaml]\ncollectives: [allgather]\nsizes: [1MB]\n")
    code, _, err = teccl("sweep", "grid.yaml", "-o", "results")
    assert code == 2 and "topologies[1]" in err and "'a_b'" in err, err
