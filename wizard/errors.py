"""Expected failures, each with the exit code the command-line contract gives it.

Anything raised as a ``WizardError`` is shown to the operator as a plain message, never
as a traceback: it is a condition of the site or the environment, not a bug.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug; the message names the journal
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of our output went away (`| head`)


class WizardError(Exception):
    """An expected failure with an operator-facing message."""

    exit_code = EXIT_USAGE


class SiteError(WizardError):
    """The site file cannot be used; ``problems`` lists one line per bad field."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"site file {path} is not valid:\n{lines}")


class LockHeldError(WizardError):
    """Another wizard holds the checkpoint lock of this site."""


class CheckpointError(WizardError):
    """The checkpoint cannot be read or written."""


class CheckpointWriteError(CheckpointError):
    """The state folder refused a write (full disk, read-only, no permission): the run
    stops there, a condition of the machine and not a bug."""


class CheckpointMissingError(CheckpointError):
    """``state.json`` is gone although the journal shows earlier work: never a silent restart."""


class ExportError(WizardError):
    """The dry-run export cannot write its output."""


class UsageError(WizardError):
    """The command line asks for something that does not exist or cannot be combined."""
