"""`memsight run NAME ...` for a Python program on PATH (profiler/launch/launchers.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsight.profiler.launch.launchers import python_program_on_path


def program(folder: Path, name: str, first_line: str) -> Path:
    path = folder / name
    path.write_text(first_line + "\nprint('hi')\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.chdir(tmp_path)
    return folder


def test_a_console_script_runs_with_the_interpreter_it_names(bin_dir: Path) -> None:
    path = program(bin_dir, "trainrun", "#!/opt/venv/bin/python3.11")
    found = python_program_on_path("trainrun")
    assert found is not None
    assert (found.path, found.interpreter) == (str(path), "/opt/venv/bin/python3.11")


def test_env_python_is_looked_up_on_path(bin_dir: Path) -> None:
    python = program(bin_dir, "python3", "#!/bin/sh")
    program(bin_dir, "launch", "#!/usr/bin/env python3")
    found = python_program_on_path("launch")
    assert found is not None and found.interpreter == str(python)


@pytest.mark.parametrize(
    "name, first_line",
    [("tool", "#!/bin/sh"), ("tool", "no shebang"), ("tool", "#!")],
)
def test_other_programs_are_not_python_programs(bin_dir: Path, name: str, first_line: str) -> None:
    program(bin_dir, name, first_line)
    assert python_program_on_path(name) is None


def test_a_name_with_a_path_or_a_file_here_is_a_script_not_a_program(bin_dir: Path) -> None:
    program(bin_dir, "train", "#!/usr/bin/python3")
    Path("train").write_text("print('the script here')\n")
    assert python_program_on_path("train") is None
    assert python_program_on_path(os.path.join(".", "missing")) is None
    assert python_program_on_path("not-installed") is None
