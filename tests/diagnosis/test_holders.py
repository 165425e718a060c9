"""Growth findings name what keeps the memory: the holders the agent's censuses saw gaining."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from profiler.diagnosis import DEFAULT_CONFIG, diagnose
from profiler.diagnosis.rules import ALL_RULES
from profiler.profile.model import Event
from tests.factories import MiB, profile, steps

RULES = {rule.RULE_ID: rule for rule in ALL_RULES}
BASE = 800 * MiB
SOURCE = """\
def train(model, data):
    kept = []
    for x in data:
        out = model(x)
        kept.append(out)
"""


def census(t: float, step: int, holders: list[dict[str, object]]) -> Event:
    return Event(
        t,
        "census",
        {"iterations_are": "optimizer steps", "iteration": step, "census": {"holders": holders}},
    )


def holder(
    file: Path, ident: str, name: str, kept_bytes: int, **extra: object
) -> dict[str, object]:
    return {
        "id": ident,
        "name": name,
        "root": name,
        "kind": "local",
        "container": "list",
        "owner": "train",
        "function": "train",
        "file": str(file),
        "line": 5,
        "first_line": 1,
        "count": kept_bytes // MiB,
        "bytes": kept_bytes,
        "grad_bytes": 0,
        "with_graph": kept_bytes // MiB,
        **extra,
    }


def test_the_holder_that_grows_is_named_with_the_line_that_adds_to_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    levels = BASE + 3 * MiB * np.arange(100)  # steps at 1.0, 1.1, ... 10.9 s
    events = [
        census(
            1.4, 5, [holder(script, "kept", "kept", 5 * MiB), holder(script, "m", "model", 9 * MiB)]
        ),
        census(
            5.9,
            50,
            [holder(script, "kept", "kept", 50 * MiB), holder(script, "m", "model", 9 * MiB)],
        ),
        census(
            10.9,
            100,
            [holder(script, "kept", "kept", 100 * MiB), holder(script, "m", "model", 9 * MiB)],
        ),
    ]
    p = profile(steps(levels), events=events)
    [finding] = RULES["growth-per-iteration"].check(p, DEFAULT_CONFIG)
    [where] = finding.where  # the model did not grow: not named
    assert (Path(where.file).name, where.line, where.function) == ("train.py", 5, "train")
    assert where.code == "kept.append(out)"
    assert where.holder is not None and "`kept` (list, local of `train()`" in where.holder
    assert where.bytes == MiB  # from the census before the fitted span to the last one
    assert diagnose(p).findings[0].where == finding.where


def test_without_two_censuses_nothing_is_named(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    levels = BASE + 3 * MiB * np.arange(100)
    p = profile(steps(levels), events=[census(5.9, 50, [holder(script, "kept", "kept", MiB)])])
    [finding] = RULES["growth-per-iteration"].check(p, DEFAULT_CONFIG)
    assert finding.where == ()
