"""``python -m devtools.doccheck [FILE.md ...]``: run every command the documentation shows.

The docs describe the CLI as it is only if their commands run, so the test suite runs them
(``tests/devtools/test_docs.py``). What the checker reads in the markdown:

* A fenced block labelled ``sh`` holds commands, one a line (a trailing backslash continues
  one, ``#`` starts a comment); in a ``console`` block the commands are the lines starting
  with ``$``, the rest is their output. A block without a label must not hold a command:
  label it ``sh`` to have it run, or ``text`` for a synopsis or an output.
* Commands: ``teccl ...`` runs in-process through the CLI's entry point
  (:func:`te_ccl.cli.main.main`, with its exit-code mapping); ``python -m devtools.X`` runs
  in a subprocess; ``make TARGET`` is checked to be a target of
  the Makefile and never run (``make test`` would run this check again). A teccl command
  piped into ``jq .KEY`` must print JSON holding KEY. ``python`` blocks run too
  (in-process, in the document's directory).
* An HTML comment before a block directs its check, directives separated by ``;``:
  ``<!-- doccheck: slow (why) -->`` parses the block's commands without running them
  (options, subcommand, the named topology or input file; a python block is compiled);
  ``exit N`` expects exit code N; ``given NAME=PATH`` copies the repository's file PATH
  to NAME first.

Each document runs in its own temporary directory, block after block, so a command reads
what an earlier one of the same document wrote; ``examples/``, ``schedules/`` and
``topologies/`` are linked in, as in a checkout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import click

REPO = Path(__file__).resolve().parent.parent
LINKED = ("examples", "schedules", "topologies")
"""Repository folders a document may name as in a checkout (read-only inputs)."""

SHELL_LANGS = {"sh", "console"}
COMMAND_START = re.compile(r"^(teccl|make|python3?)\b")
DIRECTIVE = re.compile(r"<!--\s*doccheck:(.*?)-->", re.S)
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


class DocError(Exception):
    """A document breaks the conventions above (``file:line: what``)."""


@dataclass
class Block:
    doc: Path
    line: int
    lang: str
    commands: list[tuple[int, str]] = field(default_factory=list)
    """(line, command) of a shell block."""
    source: str = ""
    """The code of a python block."""
    slow: str | None = None
    exit_code: int = 0
    given: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    doc: str
    line: int
    command: str
    ran: bool
    """False: parsed only (a slow block, or a make target)."""
    ok: bool
    detail: str = ""
    cpu_s: float = 0.0
    """CPU seconds it took, its subprocesses included."""


def directives(text: str, where: str, block: Block) -> None:
    for part in filter(None, (p.strip() for p in text.split(";"))):
        word, _, rest = part.partition(" ")
        rest = rest.strip()
        if word == "slow":
            if not re.fullmatch(r"\(.+\)", rest):
                raise DocError(f"{where}: doccheck: slow needs a reason in parentheses")
            block.slow = rest[1:-1]
        elif word == "exit" and rest.isdigit():
            block.exit_code = int(rest)
        elif word == "given" and "=" in rest:
            for pair in rest.split():
                name, _, path = pair.partition("=")
                if not (REPO / path).is_file():
                    raise DocError(f"{where}: doccheck: given {path}: no such file in the repository")
                block.given[name] = path
        else:
            raise DocError(f"{where}: doccheck: unknown directive {part!r}; "
                           "expected slow (why), exit N or given NAME=PATH")


def parse(doc: Path) -> list[Block]:
    """The blocks of ``doc`` that hold commands or Python, in order."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending = ""  # directive text since the last block
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            pending += lines[i] + "\n"
            i += 1
            continue
        fence, lang, start = m.group(2), m.group(3), i + 1
        body: list[tuple[int, str]] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append((i + 1, lines[i]))
            i += 1
        i += 1
        where = f"{_rel(doc)}:{start}"
        block = Block(doc, start, lang)
        for found in DIRECTIVE.finditer(pending):
            directives(found.group(1), where, block)
        pending = ""
        if lang in SHELL_LANGS:
            block.commands = shell_commands(body, console=lang == "console")
            if not block.commands:
                raise DocError(f"{where}: a {lang} block without a command; label it text")
            blocks.append(block)
        elif lang == "python":
            block.source = "\n".join(text for _, text in body)
            blocks.append(block)
        elif not lang and any(COMMAND_START.match(text.strip()) for _, text in body):
            raise DocError(f"{where}: a block without a label shows a command; label it sh "
                           "to have it checked, or text for a synopsis or an output")
        elif block.slow or block.given or block.exit_code:
            raise DocError(f"{where}: doccheck directives before a {lang or 'plain'} block")
    return blocks


def shell_commands(body: list[tuple[int, str]], console: bool) -> list[tuple[int, str]]:
    commands: list[tuple[int, str]] = []
    carry: tuple[int, str] | None = None
    for line, text in body:
        if carry is None:
            stripped = text.strip()
            if console:
                if not stripped.startswith("$"):
                    continue
                stripped = stripped[1:].strip()
            if not stripped or stripped.startswith("#"):
                continue
            carry = (line, "")
            text = stripped
        joined = carry[1] + " " + text.strip()
        if joined.endswith("\\"):
            carry = (carry[0], joined[:-1])
            continue
        commands.append((carry[0], _strip_comment(joined.strip())))
        carry = None
    if carry is not None:
        commands.append((carry[0], _strip_comment(carry[1].strip())))
    return commands


def _strip_comment(command: str) -> str:
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    # shlex drops the comment; rebuild the command from the tokens it kept
    return shlex.join(list(lexer)).replace("'|'", "|")


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


class _Parsed(BaseException):
    """Raised instead of running a command whose options parsed (outside ``except Exception``)."""

    def __init__(self, ctx: click.Context) -> None:
        super().__init__(ctx.command_path)
        self.ctx = ctx


def _stop_after_parsing(original):
    def invoke(self, ctx):
        if isinstance(self, click.Group):
            return original(self, ctx)
        raise _Parsed(ctx)

    return invoke


class Workspace:
    """One document's temporary directory and the files its parse-only commands would write."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.promised: set[str] = set()
        for name in LINKED:
            if (REPO / name).exists():
                (root / name).symlink_to(REPO / name, target_is_directory=True)

    def exists(self, name: str) -> bool:
        return (self.root / name).exists() or name.rstrip("/") in self.promised

    def run_block(self, block: Block) -> Iterator[Outcome]:
        for name, path in block.given.items():
            (self.root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / path, self.root / name)
        doc = _rel(block.doc)
        if block.lang == "python":
            start = _cpu()
            outcome = self._python(doc, block)
            outcome.cpu_s = _cpu() - start
            yield outcome
            return
        for line, command in block.commands:
            start = _cpu()
            try:
                ran, ok, detail = self._command(command, block)
            except DocError as e:
                ran, ok, detail = False, False, str(e)
            yield Outcome(doc, line, command, ran, ok, detail, _cpu() - start)

    def _python(self, doc: str, block: Block) -> Outcome:
        """Run a python block (a slow one is only compiled)."""
        with _in(self.root), _captured():
            try:
                code = compile(block.source, f"{doc}:{block.line}", "exec")
                if not block.slow:
                    exec(code, {"__name__": "__doc__"})
            except Exception as e:  # noqa: BLE001 - the report names it
                return Outcome(doc, block.line, "python block", not block.slow, False,
                               f"{type(e).__name__}: {e}")
        return Outcome(doc, block.line, "python block", not block.slow, True)

    def _command(self, command: str, block: Block) -> tuple[bool, bool, str]:
        stages = [s.strip() for s in command.split("|")]
        argv = shlex.split(stages[0])
        if argv[0] == "make":
            return False, *self._make(argv[1:])
        if argv[0] == "teccl":
            if block.slow:
                return False, *self._parse_teccl(argv[1:])
            code, out, err = run_teccl(argv[1:], self.root)
            if code != block.exit_code:
                return True, False, f"exit {code}, expected {block.exit_code}: {_last(err)}"
            for stage in stages[1:]:
                ok, detail = _jq(stage, out)
                if not ok:
                    return True, False, detail
            return True, True, ""
        if argv[0] in ("python", "python3") and len(stages) == 1 and (
                argv[1:2] == ["-m"] and argv[2:3] and argv[2].startswith("devtools.")):
            return self._python_command(argv[1:], block)
        raise DocError(f"{command!r}: not a command the doc check knows (teccl, make, "
                       "python -m devtools.X)")

    def _make(self, targets: list[str]) -> tuple[bool, str]:
        makefile = (REPO / "Makefile").read_text(encoding="utf-8")
        missing = [t for t in targets if not re.search(rf"^{re.escape(t)}\s*:", makefile, re.M)]
        if missing or not targets:
            return False, f"no make target {' '.join(missing) or '(none given)'} in the Makefile"
        return True, ""

    def _parse_teccl(self, args: list[str]) -> tuple[bool, str]:
        from te_ccl.cli.main import main

        with _in(self.root), _captured() as (out, err), mock.patch.object(
                click.Command, "invoke", _stop_after_parsing(click.Command.invoke)):
            try:
                main(args)
            except _Parsed as parsed:
                return self._inputs_exist(parsed.ctx)
            except SystemExit as e:
                return False, f"does not parse (exit {e.code}): {_last(err.getvalue())}"
        return False, "the command line did not reach a command"

    def _inputs_exist(self, ctx: click.Context) -> tuple[bool, str]:
        from te_ccl.spec.topology import shipped_topologies

        shipped = set(shipped_topologies())
        for param in ctx.command.params:
            value = ctx.params.get(param.name)
            values = value if isinstance(value, tuple) else (value,)
            if isinstance(param, click.Argument) and param.name != "kind":
                for v in values:
                    if isinstance(v, str | Path) and str(v) not in shipped and not self.exists(str(v)):
                        return False, f"{param.human_readable_name} {v}: no such topology or file"
            elif isinstance(param, click.Option) and ("-o" in param.opts or "out" in (param.name or "")):
                self.promised.update(str(v).rstrip("/") for v in values if v)
        return True, ""

    def _python_command(self, args: list[str], block: Block) -> tuple[bool, bool, str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        if block.slow:
            proc = subprocess.run([sys.executable, "-c", _PARSE_ONLY, *args], cwd=self.root,
                                  env=env, capture_output=True, text=True)
            return False, proc.returncode == 0, _last(proc.stderr)
        proc = subprocess.run([sys.executable, *args], cwd=self.root, env=env,
                              capture_output=True, text=True)
        ok = proc.returncode == block.exit_code
        return True, ok, "" if ok else f"exit {proc.returncode}: {_last(proc.stderr)}"


# Run a module until its click or argparse options are parsed, then exit 0.
_PARSE_ONLY = """
import argparse, runpy, sys
import click
parse_args = argparse.ArgumentParser.parse_args
def parsed(self, *a, **k):
    parse_args(self, *a, **k)
    sys.exit(0)
argparse.ArgumentParser.parse_args = parsed
invoke = click.Command.invoke
def stop(self, ctx):
    if isinstance(self, click.Group):
        return invoke(self, ctx)
    sys.exit(0)
click.Command.invoke = stop
module, *args = sys.argv[2:]  # after "-m"
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
sys.exit("ran to the end without parsing options")
"""


def run_teccl(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """``teccl ARGS`` in-process in ``cwd``: (exit code, stdout, stderr)."""
    from te_ccl.cli.main import main

    with _in(cwd), _captured() as (out, err):
        try:
            main(args)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def _jq(stage: str, out: str) -> tuple[bool, str]:
    argv = shlex.split(stage)
    if len(argv) != 2 or argv[0] != "jq" or not re.fullmatch(r"(\.[A-Za-z_]\w*)+", argv[1]):
        return False, f"{stage!r}: only '| jq .KEY' may follow a teccl command"
    try:
        value = json.loads(out)
    except ValueError:
        return False, "piped into jq, but stdout is not one JSON object"
    for key in argv[1].split(".")[1:]:
        if not isinstance(value, dict) or key not in value:
            return False, f"the JSON has no {argv[1]}"
        value = value[key]
    return True, ""


class _Output(io.TextIOWrapper):
    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", write_through=True)

    def getvalue(self) -> str:
        return self.buffer.getvalue().decode("utf-8", "replace")


@contextlib.contextmanager
def _captured() -> Iterator[tuple[_Output, _Output]]:
    out, err = _Output(), _Output()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


@contextlib.contextmanager
def _in(path: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _cpu() -> float:
    """CPU seconds of this process and its finished children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def documents() -> list[Path]:
    """README.md and docs/*.md."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def check(doc: Path) -> list[Outcome]:
    """Every command of ``doc``, in order, in a fresh temporary directory."""
    blocks = parse(doc)
    with tempfile.TemporaryDirectory(prefix="doccheck-") as tmp:
        space = Workspace(Path(tmp))
        return [outcome for block in blocks for outcome in space.run_block(block)]


@click.command("doccheck", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def main(files: tuple[Path, ...]) -> None:
    """Run the commands of FILES (default README.md and docs/*.md); exit 1 if one fails."""
    failed = 0
    for doc in files or documents():
        try:
            outcomes = check(doc)
        except DocError as e:
            click.echo(f"{e}", err=True)
            failed += 1
            continue
        for o in outcomes:
            state = ("ran" if o.ran else "parsed") if o.ok else "FAILED"
            click.echo(f"{o.doc}:{o.line}: {state} ({o.cpu_s:.1f} s CPU): {o.command}"
                       + (f"  -- {o.detail}" if o.detail else ""))
            failed += not o.ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
