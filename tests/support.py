"""Helpers for end-to-end tests: write a script, run it under memsight and under plain python,
wait for what a run leaves on disk, and check an example's findings.

Nothing here sleeps and hopes: every wait polls a condition every POLL_S up to a deadline.
Helpers for processes and terminals are in tests/processes.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from memsight.profiler.diagnosis import diagnose
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.storage import ProfileError, load_profile
from tests.load import deadline

if TYPE_CHECKING:
    from examples.catalog import Example

T = TypeVar("T")
POLL_S = 0.02

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parent.parent
# The installed console script, as a user runs it. (`python -m profiler.cli` would put the
# working directory on sys.path, where a test's own profiler.py would shadow memsight.)
_SCRIPT = Path(PYTHON).parent / "memsight"
MEMSIGHT = [str(_SCRIPT)] if _SCRIPT.exists() else [PYTHON, "-m", "memsight.profiler.cli"]


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


def way_in() -> bool:
    """Whether memsight can start its agent in a running process here: Python 3.14's
    sys.remote_exec, or a gdb that can call functions in a process on this machine."""
    if sys.version_info >= (3, 14):
        return True
    from memsight.profiler.recorder.inject import gdb_call_problem

    gdb = shutil.which("gdb")
    return gdb is not None and gdb_call_problem(gdb) is None


def write_script(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Our environment with the source tree importable, as an installed memsight would be."""
    env = dict(os.environ)
    # No empty entry: it would put the working directory on sys.path.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
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
        timeout=deadline(timeout),
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


def memsight_command(*args: str | os.PathLike[str]) -> list[str]:
    return [*MEMSIGHT, *(os.fspath(a) for a in args)]


def run_cli(
    *args: str | os.PathLike[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> Completed:
    """`memsight ARGS...` to completion, stdin closed, output captured."""
    return _run(memsight_command(*args), cwd, "", env, timeout)  # "": stdin at end of file


def run_plain(
    args: list[str],
    cwd: Path,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> Completed:
    """`python ARGS...` in `cwd`, the reference a memsight run must match."""
    return _run([PYTHON, *args], cwd, stdin, env, timeout)


def one_line(text: str) -> bool:
    return "\n" not in text.rstrip("\n") and text.strip() != ""


def wait_until(condition: Callable[[], T], timeout: float = 10.0, what: str = "the condition") -> T:
    """Poll `condition` every POLL_S until it returns something truthy; return that value.
    `timeout` is stretched under load (tests/load.py, `deadline`)."""
    timeout = deadline(timeout)
    until = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= until:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_S)


def try_load(path: Path) -> Profile | None:
    """The profile as it stands on disk now, or None while it holds too little to load."""
    try:
        return load_profile(path)
    except ProfileError:
        return None


def ram_seconds(profile: Profile | None) -> float:
    """Seconds (since t0) of the last ram sample in `profile`; -1 when there is none."""
    if profile is None or profile.ram is None or not len(profile.ram):
        return -1.0
    return float(profile.ram.t[-1])


def wait_for_samples(path: Path, seconds: float, timeout: float = 15.0) -> Profile:
    """Wait until the profile file on disk holds ram samples reaching `seconds` after t0."""

    def enough() -> Profile | None:
        profile = try_load(path)
        return profile if ram_seconds(profile) >= seconds else None

    profile = wait_until(enough, timeout, f"{seconds} s of samples in {path.name}")
    assert profile is not None
    return profile


def seconds_since_t0(profile: Profile, monotonic_ns: int) -> float:
    assert profile.info.t0_ns is not None
    return (monotonic_ns - profile.info.t0_ns) / 1e9


def check_example(example: Example, tmp_path: Path) -> None:
    """Record the example with `memsight run`; its findings must be exactly the declared ones,
    in the diagnosis and in `memsight report --json`."""
    script = tmp_path / example.path.name
    shutil.copy(example.path, script)
    result = run_memsight([*example.options, str(script)], tmp_path, timeout=180)
    assert result.returncode in (0, 1), result.stderr
    diagnosis = diagnose(result.profile())
    assert not diagnosis.failed
    found = {f.rule for f in diagnosis.findings}
    details = "\n".join(f"{f.rule}: {f.evidence.text}" for f in diagnosis.findings)
    assert example.expect <= found <= example.expect | example.may, details
    if example.where is not None:
        holder, code = example.where
        firsts = [f.where[0] for f in diagnosis.findings if f.where]
        assert any(
            holder in (first.holder or "")
            and (first.code or "").startswith(code)
            and Path(first.file).name == example.path.name
            for first in firsts
        ), f"no finding's first location is {example.where}: {firsts}"
    if not found:
        return
    report = run_cli("report", "--json", str(result.profile_path), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    reported = json.loads(report.stdout)["findings"]
    assert {f["rule"] for f in reported} == found
    for finding in reported:
        assert finding["evidence"]["text"] and finding["fixes"], finding
