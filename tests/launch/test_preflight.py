from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memsight.profiler.launch.preflight import (
    InvalidSetting,
    census_from_text,
    check_run,
    imports_torch,
    probe_interpreter,
)
from memsight.profiler.launch.spec import RunSpec
from tests.support import find_python


def problems(spec: RunSpec) -> dict[str, str]:
    return {p.setting: p.message for p in check_run(spec)}


def test_a_valid_run_has_no_problems(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("import torch\n")
    assert problems(RunSpec(target="t.py", cwd=str(tmp_path))) == {}


def test_missing_script_and_folder_are_named(tmp_path: Path) -> None:
    found = problems(RunSpec(target="nope.py", cwd=str(tmp_path / "gone"), interval_ms=0.1))
    assert found["cwd"].startswith("The working directory") and "does not exist" in found["cwd"]
    assert found["script"] == "The script nope.py does not exist."
    assert "at least 0.5 ms" in found["interval"]


def test_a_program_that_is_not_python_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("pass\n")
    found = problems(RunSpec(target="t.py", cwd=str(tmp_path), python="/bin/true"))
    assert "is not a Python interpreter" in found["python"]
    found = problems(RunSpec(target="t.py", cwd=str(tmp_path), python=str(tmp_path)))
    assert "not an executable program" in found["python"]


def test_an_interpreter_without_torch_is_refused_for_a_script_that_imports_it(
    tmp_path: Path,
) -> None:
    python = find_python("3.12") or find_python("3.13") or find_python("3.9")
    assert python is not None
    interpreter, _ = probe_interpreter(python)
    assert interpreter is not None and not interpreter.has_torch
    (tmp_path / "t.py").write_text("def f():\n    from torch.utils.data import DataLoader\n")
    (tmp_path / "plain.py").write_text("import json\n")
    assert (
        "has no torch installed"
        in problems(RunSpec(target="t.py", cwd=str(tmp_path), python=python))["python"]
    )
    assert problems(RunSpec(target="plain.py", cwd=str(tmp_path), python=python)) == {}


def test_the_current_interpreter_answers_for_itself_without_starting_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError("a second interpreter was started")

    monkeypatch.setattr("memsight.profiler.launch.preflight.subprocess.run", no_process)
    found, why = probe_interpreter(sys.executable)
    assert found is not None, why
    assert found.version == sys.version_info[:2] and found.has_torch


def test_another_interpreter_is_probed_once_and_remembered(tmp_path: Path) -> None:
    # A link to this interpreter under another path: a different environment as far as
    # memsight can tell, so it is asked by running it, once.
    other = tmp_path / "python"
    other.symlink_to(sys.executable)
    first, _ = probe_interpreter(str(other))
    second, _ = probe_interpreter(str(other))
    assert first is not None and first is second and first.version == sys.version_info[:2]


def test_torch_imports_are_found_in_any_form(tmp_path: Path) -> None:
    cases = {
        "import torch.nn as nn": True,
        "from torch import nn": True,
        "import torchvision": False,
        "x = 'import torch'": False,
    }
    for source, expected in cases.items():
        path = tmp_path / "s.py"
        path.write_text(source + "\n")
        assert imports_torch(path) is expected, source


@pytest.mark.parametrize(
    ("typed", "read"),
    [("auto", "auto"), ("never", "never"), (" Never ", "never"), ("every-10", "every-10")],
)
def test_the_census_setting_is_read_as_typed(typed: str, read: str) -> None:
    assert census_from_text(typed) == read


@pytest.mark.parametrize("typed", ["sometimes", "every-0", "every-", "every-x", "10"])
def test_a_census_setting_that_cannot_be_read_names_the_option(typed: str) -> None:
    with pytest.raises(InvalidSetting) as raised:
        census_from_text(typed)
    assert raised.value.problem.setting == "census"
    assert "Censuses are taken auto, never or every-N" in str(raised.value)
