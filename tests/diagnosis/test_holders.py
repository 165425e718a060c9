"""Growth findings name what keeps the memory: the holders the agent's censuses saw gaining."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memsight.profiler.diagnosis import DEFAULT_CONFIG, diagnose
from memsight.profiler.diagnosis.rules import ALL_RULES
from memsight.profiler.profile.model import Event
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
    # ... and the finding says why, and what to do.
    assert finding.where_note is not None
    assert finding.where_note.startswith("fewer than two censuses fell in the climb's span")
    assert "--census every-10" in finding.where_note


def test_an_empty_where_says_why(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    levels = BASE + 3 * MiB * np.arange(100)
    none = profile(steps(levels))
    [finding] = RULES["growth-per-iteration"].check(none, DEFAULT_CONFIG)
    assert finding.where_note is not None and finding.where_note.startswith("no census")
    level = [holder(script, "m", "model", 9 * MiB)]
    flat = profile(steps(levels), events=[census(1.4, 5, level), census(10.9, 100, level)])
    [finding] = RULES["growth-per-iteration"].check(flat, DEFAULT_CONFIG)
    assert finding.where == ()
    assert finding.where_note is not None
    assert "no variable, attribute or cell the censuses reach gained memory between " in (
        finding.where_note
    )
    assert "optimizer step 5 and optimizer step 100" in finding.where_note
    cut = census(10.9, 100, level)
    cut.data["census"]["cost"] = {"partial": True, "stopped_by": "memory"}
    partial = profile(steps(levels), events=[census(1.4, 5, level), cut])
    [finding] = RULES["growth-per-iteration"].check(partial, DEFAULT_CONFIG)
    assert finding.where_note is not None
    assert "was cut short (the census stopped at its limit of memory)" in finding.where_note
    # Every view carries it.
    from memsight.profiler.diagnosis import finding_to_json
    from memsight.profiler.diagnosis.text import format_finding

    assert finding_to_json(finding)["where_note"] == finding.where_note
    assert any("Where: not named: " in line for line in format_finding(finding, 1))


def test_a_holder_is_named_by_its_share_of_live_growth_not_of_rss_holes(tmp_path: Path) -> None:
    # Many small kept tensors: RSS climbs 3 MiB per step, mostly the holes between them; the
    # kept tensors are 0.1 MiB per step, under 5 % of the RSS climb but all of the live growth.
    from dataclasses import replace

    from memsight.profiler.diagnosis.growth import HeapGrowth, growths
    from memsight.profiler.diagnosis.rules import growth_per_iteration as rule

    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    levels = BASE + 3 * MiB * np.arange(100)
    small = MiB // 10
    events = [
        census(1.4, 5, [holder(script, "kept", "kept", 5 * small)]),
        census(10.9, 100, [holder(script, "kept", "kept", 100 * small)]),
    ]
    p = profile(steps(levels), events=events)
    [growth] = growths(p, DEFAULT_CONFIG)
    assert rule._where_held(p, growth) == ()  # against the RSS climb: too small to name
    live = HeapGrowth(in_use=small * 95.0, in_use_r2=0.99, free=0.0)
    with_heap = replace(growth, heap=live)
    [where] = rule._where_held(p, with_heap)
    assert where.holder is not None and "`kept`" in where.holder


METHOD_SOURCE = """\
class Trainer:
    def __init__(self):
        self.history = []

    def step(self, out):
        self.history.append(out)
"""


def test_the_function_shown_is_the_one_that_holds_the_line(tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(METHOD_SOURCE)
    levels = BASE + 3 * MiB * np.arange(100)
    attribute = {"kind": "attribute", "owner": "Trainer", "function": None, "root": "history"}
    events = [
        census(1.4, 5, [holder(script, "h", "Trainer.history", 5 * MiB, **attribute)]),
        census(10.9, 100, [holder(script, "h", "Trainer.history", 100 * MiB, **attribute)]),
    ]
    [finding] = RULES["growth-per-iteration"].check(
        profile(steps(levels), events=events), DEFAULT_CONFIG
    )
    [where] = finding.where
    assert (where.line, where.function) == (6, "Trainer.step")  # not the owner, "Trainer"
    # The holder's gain, then the holder as the census saw it: two things, each said once.
    assert where.holder is not None
    # The holder keeps 1 of the 3 MiB the memory grows by each step: said against the growth.
    assert ": +1.00 MiB per iteration of the +3.00 MiB the memory grew by; 100 tensors" in (
        where.holder
    )
    assert where.holder.endswith("100.0 MiB at optimizer step 100")
