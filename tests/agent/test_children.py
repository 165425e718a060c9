"""What a program the target starts finds in its environment (profiler/agent/children.py):
memsight's two variables built on its own PYTHONPATH, and everything else as given."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import cast

import pytest

from memsight.profiler.agent.children import ChildEnvironment
from memsight.profiler.protocol import AGENT_ENV

CONFIG = {"host": "127.0.0.1", "port": 4242, "token": "t", "pythonpath": "/the/targets"}
STARTUP = "/memsight/agent/startup"


def entries_of(env: list[bytes]) -> dict[str, str]:
    pairs = [os.fsdecode(e).partition("=") for e in env]
    return {key: value for key, _, value in pairs}


@pytest.fixture
def children() -> ChildEnvironment:
    return ChildEnvironment(CONFIG, startup_dir=STARTUP)


def test_a_child_given_an_environment_gets_the_agent_on_its_own_pythonpath(
    children: ChildEnvironment,
) -> None:
    env = entries_of(children.entries([b"RANK=1", b"PYTHONPATH=/child/lib", b"A=b=c"]))
    assert env["RANK"] == "1" and env["A"] == "b=c"
    assert env["PYTHONPATH"] == STARTUP + os.pathsep + "/child/lib"
    config = json.loads(env[AGENT_ENV])
    # The child's agent puts back the child's own PYTHONPATH, not the target's
    assert config["pythonpath"] == "/child/lib"
    assert {k: config[k] for k in ("host", "port", "token")} == {
        "host": "127.0.0.1",
        "port": 4242,
        "token": "t",
    }


def test_a_child_without_pythonpath_gets_only_the_startup_folder(
    children: ChildEnvironment,
) -> None:
    env = entries_of(children.entries([b"HOME=/root"]))
    assert env["PYTHONPATH"] == STARTUP
    assert json.loads(env[AGENT_ENV])["pythonpath"] is None


def test_a_child_that_inherits_gets_the_targets_environment_plus_the_agent(
    children: ChildEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSIGHT_TEST_VALUE", "kept")
    env = entries_of(children.entries(None))
    assert env["MEMSIGHT_TEST_VALUE"] == "kept"
    assert AGENT_ENV in env


def test_an_environment_that_names_the_agent_already_is_left_as_it_is(
    children: ChildEnvironment,
) -> None:
    given = [os.fsencode(f"{AGENT_ENV}=mine"), b"PYTHONPATH=/x"]
    assert children.entries(given) == given


def test_posix_spawn_mappings_str_and_bytes(children: ChildEnvironment) -> None:
    text = children.mapping({"PYTHONPATH": "/p", "X": "1"})
    assert text["X"] == "1" and text["PYTHONPATH"] == STARTUP + os.pathsep + "/p"
    # A bytes environment, as os.posix_spawn takes one: typed for str only, it stays bytes.
    bytes_mapping = cast("Callable[[dict[bytes, bytes]], dict[bytes, bytes]]", children.mapping)
    raw = bytes_mapping({b"X": b"1"})
    assert raw[b"X"] == b"1" and raw[b"PYTHONPATH"] == os.fsencode(STARTUP)
    assert all(isinstance(k, bytes) for k in raw)
