"""Python programs run by name: `memsight run torchrun ...`, `memsight run accelerate launch ...`.

A launcher installed by pip (a console script) is a Python file on PATH whose first line names
its interpreter. Run by name from a shell, the kernel runs that interpreter on the file's full
path: memsight does the same, so sys.argv, sys.executable and the environment are what the
shell would give, and the launcher's own processes (torchrun's ranks) get the agent like any
child.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

SHEBANG_LIMIT = 256  # bytes of the first line read; the kernel reads at most 256 too


@dataclass(frozen=True)
class PythonProgram:
    path: str  # absolute path of the script on PATH
    interpreter: str  # what its first line names


def python_program_on_path(name: str) -> PythonProgram | None:
    """The Python program `name` runs from a shell, or None: `name` has a path separator or
    names a file here (a script run by path), is not on PATH, or is not a Python script."""
    if not name or os.sep in name or os.path.exists(name):
        return None
    found = shutil.which(name)
    if found is None:
        return None
    try:
        with open(found, "rb") as f:
            first = f.readline(SHEBANG_LIMIT)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    interpreter = words[0]
    if os.path.basename(interpreter) == "env" and len(words) > 1:  # #!/usr/bin/env python3
        interpreter = shutil.which(words[1]) or words[1]
    if not os.path.basename(interpreter).startswith("python"):
        return None
    return PythonProgram(os.path.abspath(found), interpreter)
