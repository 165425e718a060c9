"""Helpers for end-to-end tests: write a script, run it under memsight and under plain python."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from profiler.model import Profile
from profiler.storage import load_profile

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parent.parent
# The installed console script, as a user runs it. (`python -m profiler.cli` would put the
# working directory on sys.path, where a test's own profiler.py would shadow memsight.)
_SCRIPT = Path(PYTHON).parent / "memsight"
MEMSIGHT = [str(_SCRIPT)] if _SCRIPT.exists() else [PYTHON, "-m", "profiler.cli"]


def find_python(version: str) -> str | None:
    """An interpreter of `version` (e.g. "3.9") that really runs, or None."""
    import glob
    import shutil

    candidates = sorted(
        glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python{version}"))
    )
    candidates += [p for p in [shutil.which(f"python{version}")] if p]
    for candidate in candidates:
        try:
            ok = (
                subprocess.run(
                    [candidate, "-c", "pass"], capture_output=True, timeout=30
                ).returncode
                == 0
            )
        except OSError:
            ok = False
        if ok:
            return candidate
    return None


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str
    profile_path: Path | None = None

    def profile(self) -> Profile:
        assert self.profile_path is not None
        return load_profile(self.profile_path)


def write_script(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Our environment with the source tree importable, as an installed memsight would be."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def _run(
    argv: list[str], cwd: Path, stdin: str | None, env: dict[str, str] | None, timeout: float
) -> Completed:
    proc = subprocess.run(
        argv,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env=env or child_env(),
        timeout=timeout,
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def run_memsight(
    args: list[str],
    cwd: Path,
    out: Path | None = None,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> Completed:
    """`memsight run --out OUT -q ARGS...` in `cwd`; returns its output and profile path."""
    out = out or cwd / "run.memsight"
    result = _run([*MEMSIGHT, "run", "-q", "--out", str(out), *args], cwd, stdin, env, timeout)
    result.profile_path = out
    return result


def run_plain(
    args: list[str],
    cwd: Path,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> Completed:
    """`python ARGS...` in `cwd`, the reference a memsight run must match."""
    return _run([PYTHON, *args], cwd, stdin, env, timeout)
