"""Check a run specification before anything is launched: the one validator of a run.

The command line and the app both build a RunSpec and ask check_run() what is wrong with it.
Each problem names the setting it concerns (the app marks that field, the command line names
its option) and says, in one sentence, what is wrong.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.typed_values import (
    OutOfRange,
    integer_between,
    number_between,
    shown,
    size_between,
)

MIN_INTERVAL_MS = 0.5
MAX_INTERVAL_MS = 60_000.0  # a sample a minute: anything slower records next to nothing
MAX_CENSUS_EVERY = 1_000_000  # iterations between censuses
MAX_ANATOMY_ITERATION = 1_000_000  # the latest iteration --anatomy may name
MIN_PYTHON = (3, 9)
PROBE = (
    "import sys, importlib.util;"
    "print(sys.version_info[0], sys.version_info[1], importlib.util.find_spec('torch') is not None)"
)


# The settings of a run, by the names problems use for them.
Setting = Literal[
    "script", "args", "cwd", "python", "env", "interval", "ram_budget", "census", "anatomy"
]


@dataclass(frozen=True)
class Problem:
    setting: Setting
    message: str
    # A blocking problem stops the run; the others are worth saying but may be wrong (the
    # torch check reads the script's imports, which may sit behind a try/except).
    blocking: bool = True


class InvalidSetting(ValueError):
    """A setting typed as text that cannot be read; carries the problem to show."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def interval_from_text(text: str) -> float:
    """The sampling interval typed in milliseconds ("10", "0.5")."""
    try:
        return number_between(text, MIN_INTERVAL_MS, MAX_INTERVAL_MS, "a number of milliseconds")
    except ValueError as exc:
        raise InvalidSetting(Problem("interval", f"The sampling interval {exc}.")) from None


def ram_budget_from_text(text: str, required: bool = False) -> int | None:
    """The RAM budget a user typed ("6 GiB", "6G"); None for an empty field, unless
    `required` (an option given on the command line must say something)."""
    if not text.strip() and not required:
        return None
    try:
        return size_between(text)
    except OutOfRange as exc:
        message = f"The RAM budget {exc}."
    except ValueError:
        message = (
            f"The RAM budget must be a size such as 6GiB or 512MiB, not {shown(text.strip())}."
        )
    raise InvalidSetting(Problem("ram_budget", message))


def census_from_text(text: str) -> str:
    """When to take censuses of live tensors, as typed: "auto", "never" or "every-N"."""
    value = text.strip(" \t").lower()
    if value in ("auto", "never"):
        return value
    if value.startswith("every-"):
        try:
            count = integer_between(value.removeprefix("every-"), 1, MAX_CENSUS_EVERY)
        except ValueError:
            pass
        else:
            return f"every-{count}"
    message = (
        "Censuses are taken auto, never or every-N (N iterations, from 1 to "
        f"{MAX_CENSUS_EVERY:,}), not {shown(text.strip())}."
    )
    raise InvalidSetting(Problem("census", message))


def anatomy_from_text(text: str) -> str:
    """Which iteration's anatomy is measured, as typed: "auto" (the first training forward),
    "off", or the number of an iteration ("3")."""
    value = text.strip(" \t").lower()
    if value in ("auto", "off"):
        return value
    try:
        return str(integer_between(value, 1, MAX_ANATOMY_ITERATION))
    except ValueError:
        message = (
            "The anatomy is measured auto, off or at iteration N (from 1 to "
            f"{MAX_ANATOMY_ITERATION:,}), not {shown(text.strip())}."
        )
        raise InvalidSetting(Problem("anatomy", message)) from None


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
    if not spec.interval_ms >= MIN_INTERVAL_MS:  # NaN too
        problems.append(
            Problem("interval", f"The sampling interval must be at least {MIN_INTERVAL_MS:g} ms.")
        )
    elif not spec.interval_ms <= MAX_INTERVAL_MS:  # infinity too
        problems.append(
            Problem("interval", f"The sampling interval must be at most {MAX_INTERVAL_MS:g} ms.")
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
                blocking=False,
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
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        # The interpreter running memsight (the default): it answers here, without starting a
        # second one (tens of milliseconds on every run). The same path, not the same file
        # behind symlinks: a virtual environment's python is its own environment.
        has_torch = importlib.util.find_spec("torch") is not None
        return Interpreter(python, (sys.version_info[0], sys.version_info[1]), has_torch), ""
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
