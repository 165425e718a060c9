from __future__ import annotations

import json
import os
from pathlib import Path

from memsight.profiler.launch.command import agent_startup_dir, build_launch
from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.protocol import AGENT_ENV


def test_a_script_runs_as_the_users_own_python_command_with_its_arguments_untouched() -> None:
    spec = RunSpec(target="train.py", args=("--lr", "0.1", "-m", "x"), cwd="/work", python="/py")
    plan = build_launch(spec, port=4242, token="secret", base_env={"HOME": "/root"})
    assert plan.argv == ["/py", "train.py", "--lr", "0.1", "-m", "x"]
    assert plan.cwd == "/work"


def test_a_module_is_passed_with_dash_m() -> None:
    spec = RunSpec(target="pkg.train", args=("a",), module=True, python="/py")
    plan = build_launch(spec, port=1, token="t", base_env={})
    assert plan.argv == ["/py", "-m", "pkg.train", "a"]


def test_the_environment_is_the_given_one_plus_the_agent_variable_and_its_pythonpath() -> None:
    spec = RunSpec(target="t.py", env={"A": "1"}, interval_ms=2.5, hooks=False)
    plan = build_launch(spec, port=9, token="tok", base_env={"IGNORED": "x"})
    assert set(plan.env) == {"A", AGENT_ENV, "PYTHONPATH"}
    assert plan.env["PYTHONPATH"] == agent_startup_dir()
    config = json.loads(plan.env[AGENT_ENV])
    assert config == {
        "host": "127.0.0.1",
        "port": 9,
        "token": "tok",
        "interval_ms": 2.5,
        "hooks": False,
        "census": "auto",
        "anatomy": "auto",
        "pythonpath": None,
    }


def test_the_users_pythonpath_stays_behind_the_agents_and_is_remembered() -> None:
    spec = RunSpec(target="t.py", env={"PYTHONPATH": "/mine:/theirs"})
    plan = build_launch(spec, port=9, token="tok", base_env={})
    assert plan.env["PYTHONPATH"] == agent_startup_dir() + os.pathsep + "/mine:/theirs"
    assert json.loads(plan.env[AGENT_ENV])["pythonpath"] == "/mine:/theirs"


def test_an_empty_pythonpath_adds_no_working_directory_entry() -> None:
    spec = RunSpec(target="t.py", env={"PYTHONPATH": ""})
    plan = build_launch(spec, port=9, token="tok", base_env={})
    assert plan.env["PYTHONPATH"] == agent_startup_dir()
    assert json.loads(plan.env[AGENT_ENV])["pythonpath"] == ""


def test_the_startup_folder_ships_inside_the_profiler_package_and_holds_only_sitecustomize() -> (
    None
):
    folder = Path(agent_startup_dir())
    assert folder.parent.parent.name == "profiler"
    assert sorted(p.name for p in folder.iterdir() if p.name != "__pycache__") == [
        "sitecustomize.py"
    ]


def test_display_names_come_from_the_script_stem_or_the_module_tail() -> None:
    assert RunSpec(target="dir/train.py").display_name == "train"
    assert RunSpec(target="pkg.sub.run", module=True).display_name == "run"
