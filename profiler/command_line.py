"""What every `memsight` command shares about reading its command line: usage errors are one line.

argparse prints its usage and then `PROG: error: ...`; memsight's commands say
`memsight: error: OPTION: ...` on one line and exit with status 2, whatever found the problem
(argparse itself, or a value read by profiler/typed_values.py).
"""

from __future__ import annotations

import argparse
import re
from typing import NoReturn


class UsageError(Exception):
    """Bad command-line input: reported as `memsight: error: ...` with exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose errors are a UsageError (one line, exit status 2)."""

    def error(self, message: str) -> NoReturn:
        # "argument --fail-on: invalid choice: ..." -> "--fail-on: invalid choice: ..."
        message = re.sub(r"^argument ([^:]+): ", r"\1: ", message)
        raise UsageError(f"{message} (see `{self.prog} --help`)")
