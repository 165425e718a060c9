from __future__ import annotations

import json
from pathlib import Path

from profiler.launch.command import agent_bootstrap_path, build_launch
from profiler.launch.spec import RunSpec
from profiler.protocol import AGENT_ENV


def test_a_script_runs_through_the_bootstrap_with_its_arguments_untouched() -> None:
    spec = RunSpec(target="train.py", args=("--lr", "0.1", "-m", "x"), cwd="/work", python="/py")
    plan = build_launch(spec, port=4242, token="secret", base_env={"HOME": "/root"})
    assert plan.argv == ["/py", agent_bootstrap_path(), "train.py", "--lr", "0.1", "-m", "x"]
    assert plan.cwd == "/work"


def test_a_module_is_passed_with_dash_m() -> None:
    spec = RunSpec(target="pkg.train", args=("a",), module=True, python="/py")
    plan = build_launch(spec, port=1, token="t", base_env={})
    assert plan.argv[2:] == ["-m", "pkg.train", "a"]


def test_the_environment_is_the_given_one_plus_only_the_agent_variable() -> None:
    spec = RunSpec(target="t.py", env={"A": "1"}, interval_ms=2.5, hooks=False)
    plan = build_launch(spec, port=9, token="tok", base_env={"IGNORED": "x"})
    assert set(plan.env) == {"A", AGENT_ENV}
    config = json.loads(plan.env[AGENT_ENV])
    assert config == {
        "host": "127.0.0.1",
        "port": 9,
        "token": "tok",
        "interval_ms": 2.5,
        "hooks": False,
    }


def test_the_bootstrap_ships_inside_the_profiler_package() -> None:
    path = Path(agent_bootstrap_path())
    assert path.is_file()
    assert path.parent.parent.name == "profiler"


def test_display_names_come_from_the_script_stem_or_the_module_tail() -> None:
    assert RunSpec(target="dir/train.py").display_name == "train"
    assert RunSpec(target="pkg.sub.run", module=True).display_name == "run"
