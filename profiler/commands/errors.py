"""How a command says it failed: one line on stderr, `memsight: error: ...`, and its status.

Every text that can come from a file or the target (a path, a profile's complaint) passes
through terminal_safe here, so no command writes raw control characters to the terminal.
"""

from __future__ import annotations

import sys

from memsight.profiler.output_path import OutputError, output_failure
from memsight.profiler.terminal_text import terminal_safe


def error(message: str, status: int = 1) -> int:
    """Say `message` as the command's error; the exit status to return."""
    sys.stderr.write(f"memsight: error: {terminal_safe(message)}\n")
    return status


def output_error(exc: OutputError | OSError, path: str, option: str) -> int:
    """An output that could not be written (profiler/output_path.py): `option: problem`; the
    exit status for it."""
    status, problem = output_failure(exc, path)
    sys.stderr.write(f"memsight: error: {option}: {terminal_safe(problem)}\n")
    return status
