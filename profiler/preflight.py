"""Check a run specification before anything is launched (Qt-free; used by the GUI).

Each problem names the setting it concerns and says, in one sentence, what is wrong.
"""

from __future__ import annotations

import ast
import os
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from profiler.launch import RunSpec

MIN_INTERVAL_MS = 0.5
MIN_PYTHON = (3, 9)
PROBE = (
    "import sys, importlib.util;"
    "print(sys.version_info[0], sys.version_info[1], importlib.util.find_spec('torch') is not None)"
)


@dataclass(frozen=True)
class Problem:
    setting: str  # "script", "cwd", "python", "interval"
    message: str


@dataclass(frozen=True)
class Interpreter:
    path: str
    version: tuple[int, int]
    has_torch: bool


def check_run(spec: RunSpec) -> list[Problem]:
    problems: list[Problem] = []
    cwd = Path(spec.cwd)
    if not cwd.is_dir():
        problems.append(Problem("cwd", f"The working directory {spec.cwd} does not exist."))
    script: Path | None = None
    if not spec.module:
        script = Path(spec.target) if os.path.isabs(spec.target) else cwd / spec.target
        if not spec.target:
            problems.append(Problem("script", "Choose a script to run."))
        elif not script.exists():
            problems.append(Problem("script", f"The script {spec.target} does not exist."))
        elif script.is_dir() and not (script / "__main__.py").exists():
            problems.append(Problem("script", f"{spec.target} is a folder without a __main__.py."))
    elif not spec.target:
        problems.append(Problem("script", "Name the module to run."))
    if spec.interval_ms < MIN_INTERVAL_MS:
        problems.append(
            Problem("interval", f"The sampling interval must be at least {MIN_INTERVAL_MS:g} ms.")
        )
    interpreter, why = probe_interpreter(spec.python)
    if interpreter is None:
        problems.append(Problem("python", why))
    elif interpreter.version < MIN_PYTHON:
        version = ".".join(map(str, interpreter.version))
        problems.append(
            Problem(
                "python", f"{spec.python} is Python {version}; memsight needs Python 3.9 or newer."
            )
        )
    elif not interpreter.has_torch and script is not None and imports_torch(script):
        problems.append(
            Problem(
                "python",
                f"The script imports torch, but {spec.python} has no torch installed. "
                "Pick the interpreter of the environment the script runs in.",
            )
        )
    return problems


def probe_interpreter(python: str) -> tuple[Interpreter | None, str]:
    """(Interpreter, "") when `python` runs as a Python interpreter, else (None, why not)."""
    path = Path(python)
    if not path.exists():
        return None, f"The interpreter {python} does not exist."
    if path.is_dir() or not os.access(path, os.X_OK):
        return None, f"{python} is not an executable program."
    try:
        stat = path.stat()
        return _probe(str(path), stat.st_mtime_ns, stat.st_size), ""
    except _NotPython as exc:
        return None, f"{python} is not a Python interpreter ({exc})."


class _NotPython(Exception):
    pass


@lru_cache(maxsize=32)
def _probe(python: str, _mtime: int, _size: int) -> Interpreter:
    try:
        out = subprocess.run(
            [python, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _NotPython(str(exc)) from None
    fields = out.stdout.split()
    if out.returncode != 0 or len(fields) != 3 or not all(f.isdigit() for f in fields[:2]):
        detail = (out.stderr.strip().splitlines() or ["it did not answer like Python"])[-1]
        raise _NotPython(detail[:200])
    return Interpreter(python, (int(fields[0]), int(fields[1])), fields[2] == "True")


def imports_torch(script: Path) -> bool:
    """Whether the script (or its __main__.py) has an import of torch anywhere in it."""
    path = script / "__main__.py" if script.is_dir() else script
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "torch" for a in node.names
        ):
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] == "torch"
        ):
            return True
    return False
