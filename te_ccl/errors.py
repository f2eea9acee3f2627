"""One error hierarchy; each class carries the exit code of the command-line contract.

The library raises these and never prints or exits; ``te_ccl.cli`` catches
:class:`TecclError` once and turns it into a message and ``exit_code``.
"""

from __future__ import annotations


class TecclError(Exception):
    """Base of every error teccl reports to the user."""

    exit_code = 70  # EX_SOFTWARE: a bug, not the user's fault


class InputWarning(UserWarning):
    """A quirk of an input that was worked around (a dump's self-link skipped): issued
    with :func:`warnings.warn`, the message a full ``file:line: what`` line; the CLI
    prints each as one ``warning:`` line on stderr."""


class VerificationError(TecclError):
    """A produced or given artefact failed a check (exit code 1)."""

    exit_code = 1


class SpecError(TecclError):
    """Bad input: a file, key or flag the user can fix (exit code 2).

    The message is one line naming the file, the key and what was expected.
    """

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None,
                 line: int | None = None) -> None:
        self.file = file
        self.key = key
        self.line = line
        self.reason = message
        where = ""
        if file:
            where = f"{file}"
            if line is not None:
                where += f":{line}"
            where += ": "
        if key:
            where += f"{key}: "
        super().__init__(f"{where}{message}")


class SolverError(TecclError):
    """The solver gave up: infeasible horizon, or a time limit without a solution (exit code 3)."""

    exit_code = 3


class RuntimeLimitError(TecclError):
    """A schedule the MSCCL runtime cannot hold: too many channels, steps per thread
    block, waited thread blocks (``depid``), thread blocks or XML elements per rank
    (exit code 3, like the solver giving up: the input was fine, the result does not fit).

    The compile answers it by solving again with fewer sub-chunks where it can
    (:func:`te_ccl.compiler.pipeline.compile_collective`).
    """

    exit_code = 3
