"""The line that adds to a holder, read from the source."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from memsight.profiler.diagnosis.adders import adding_line, binding_line

SOURCE = """
import collections
history = {"train": []}
seen = set()


class Trainer:
    registry = []

    def __init__(self):
        self.cache = {}
        self.kept = collections.deque()

    def step(self, x, out):
        self.cache[x] = out
        self.kept.append(out)
        Trainer.registry.extend([out])


def train(model, data):
    kept_outputs = []
    total = 0
    norm = None
    for x in data:
        out = model(x)
        kept_outputs.append(out)
        total += out.sum()
        history["train"].append(out)
        seen.add(out)
        norm = out if norm is None else norm + out
    kept_outputs.append(None)
    return kept_outputs


def helper():
    kept_outputs = []
    kept_outputs.append(1)
"""


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(SOURCE))
    return str(path)


def line_of(script: str, text: str) -> int:
    return 1 + next(
        i for i, line in enumerate(Path(script).read_text().splitlines()) if text in line
    )


@pytest.mark.parametrize(
    ("name", "attribute", "function", "expected"),
    [
        ("kept_outputs", False, "def train", "kept_outputs.append(out)"),  # in the loop first
        ("total", False, "def train", "total += out.sum()"),
        ("norm", False, "def train", "norm = out if norm is None else norm + out"),
        ("history", False, None, 'history["train"].append(out)'),
        ("seen", False, None, "seen.add(out)"),
        ("cache", True, None, "self.cache[x] = out"),
        ("kept", True, None, "self.kept.append(out)"),
        ("registry", True, None, "Trainer.registry.extend([out])"),
        ("kept_outputs", False, "def helper", "kept_outputs.append(1)"),
    ],
)
def test_the_line_that_adds_to_each_kind_of_holder(
    script: str, name: str, attribute: bool, function: str | None, expected: str
) -> None:
    first = line_of(script, function) if function else None
    found = adding_line(script, name, attribute=attribute, first_line=first)
    assert found is not None and found.code == expected
    assert found.line == line_of(script, expected)


def test_no_line_for_a_holder_never_added_to_or_a_file_that_is_gone(script: str) -> None:
    assert adding_line(script, "data", first_line=line_of(script, "def train")) is None
    assert adding_line(script + ".gone", "kept_outputs") is None


@pytest.mark.parametrize(
    ("name", "attribute", "function", "expected"),
    [
        ("out", False, "def train", "out = model(x)"),  # in the loop
        ("x", False, "def train", "for x in data:"),
        ("cache", True, None, "self.cache = {}"),
        ("history", False, None, 'history = {"train": []}'),
    ],
)
def test_the_line_that_assigns_a_holder(
    script: str, name: str, attribute: bool, function: str | None, expected: str
) -> None:
    # What held the most at an out-of-memory error is often what a name was last set to.
    first = line_of(script, function) if function else None
    found = binding_line(script, name, attribute=attribute, first_line=first)
    assert found is not None and found.code == expected
    assert found.line == line_of(script, expected)
    assert binding_line(script, "nowhere", first_line=first) is None
