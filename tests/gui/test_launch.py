"""`memsight FILE` in a real subprocess: the app starts and opens what it was given.

What the window opened is seen through the settings file it writes (recent profiles and
scripts), in a private config home.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.processes import wait_for_setting
from tests.support import MEMSIGHT, child_env, run_memsight, write_script

# Starts the app in a subprocess (and records a run for it to open).
pytestmark = pytest.mark.slow


def _launch(target: Path, home: Path) -> subprocess.Popen[bytes]:
    env = child_env(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            "QT_QPA_PLATFORM": "offscreen",
        }
    )
    return subprocess.Popen(
        [*MEMSIGHT, str(target)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


@pytest.mark.parametrize("kind", ["profile", "script"])
def test_memsight_file_opens_it_in_the_app(tmp_path: Path, kind: str) -> None:
    script = write_script(tmp_path, "train.py", "print('hello')\n")
    target = script
    if kind == "profile":
        result = run_memsight([str(script)], tmp_path, out=tmp_path / "run.memsight")
        assert result.returncode == 0, result.stderr
        target = tmp_path / "run.memsight"
    with _launch(target, tmp_path / "home") as proc:  # its output pipe closed at the end
        try:
            wait_for_setting(proc, tmp_path / "home", str(target.resolve()))
        finally:
            proc.terminate()
            proc.wait(10)
