"""`memsight report PROFILE --html OUT.html` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.processes import record_in_terminal
from tests.support import Completed, run_cli, write_script

# Each test records a run under `memsight run`, then reports it.
pytestmark = pytest.mark.slow


def _recorded(tmp_path: Path) -> Path:
    script = write_script(
        tmp_path, "small.py", "data = bytearray(30 * 2**20)\nprint('<b>hi</b>')\n"
    )
    out = tmp_path / "run.memsight"
    code, shown = record_in_terminal(["run", "-q", "-o", out, script], tmp_path)
    assert code == 0, shown
    return out


def report(tmp_path: Path, *args: str) -> Completed:
    return run_cli("report", *args, cwd=tmp_path)


def test_html_is_written_and_said(tmp_path: Path) -> None:
    profile = _recorded(tmp_path)
    out = tmp_path / "out.html"
    done = report(tmp_path, str(profile), "--html", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert f"wrote {out}" in done.stderr
    text = out.read_text(encoding="utf-8")
    assert "small.py" in text and "&lt;b&gt;hi&lt;/b&gt;" in text


def test_html_with_json_does_both(tmp_path: Path) -> None:
    profile = _recorded(tmp_path)
    out = tmp_path / "out.html"
    done = report(tmp_path, str(profile), "--html", str(out), "--json")
    assert done.returncode == 0 and out.exists()
    assert json.loads(done.stdout)["run"]["script"].endswith("small.py")


def test_html_into_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    profile = _recorded(tmp_path)
    done = report(tmp_path, str(profile), "--html", str(tmp_path / "nope" / "out.html"))
    assert done.returncode == 1
    assert done.stderr.strip() == f"memsight: error: --html: no such directory: {tmp_path / 'nope'}"
