"""`memsight FILE` in a real subprocess: the app starts and opens what it was given.

What the window opened is seen through the settings file it writes (recent profiles and
scripts), in a private config home.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support import MEMSIGHT, child_env, run_memsight, write_script


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


def _wait_for_setting(proc: subprocess.Popen[bytes], home: Path, text: str) -> str:
    settings = home / "config" / "memsight" / "memsight.conf"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        if settings.exists() and text in (content := settings.read_text()):
            return content
        time.sleep(0.05)
    raise AssertionError(f"{text} never reached {settings}")


@pytest.mark.parametrize("kind", ["profile", "script"])
def test_memsight_file_opens_it_in_the_app(tmp_path: Path, kind: str) -> None:
    script = write_script(tmp_path, "train.py", "print('hello')\n")
    target = script
    if kind == "profile":
        result = run_memsight([str(script)], tmp_path, out=tmp_path / "run.memsight")
        assert result.returncode == 0, result.stderr
        target = tmp_path / "run.memsight"
    proc = _launch(target, tmp_path / "home")
    try:
        _wait_for_setting(proc, tmp_path / "home", str(target.resolve()))
    finally:
        proc.terminate()
        proc.wait(10)
