"""Memory contents at a census, and what changed between two (report --contents)."""

from __future__ import annotations

import pytest

from memsight.profiler.diagnosis.contents import (
    census_label,
    changes,
    contents,
    contents_json,
    format_contents,
    pick,
)
from memsight.profiler.profile.model import Event
from tests.factories import MiB, profile


def census(t: float, step: int, kept: int) -> Event:
    holders = [
        {
            "id": "local:train:kept",
            "name": "kept",
            "kind": "local",
            "container": "list",
            "owner": "train",
            "file": "/w/train.py",
            "line": 9,
            "count": kept,
            "bytes": kept * MiB,
            "grad_bytes": 0,
            "with_graph": kept,
            "devices": ["cpu"],
            "dtypes": ["float32"],
            "shapes": [[256, 2048]],
        },
        {
            "id": "global:__main__:model",
            "name": "model",
            "kind": "global",
            "container": "Sequential",
            "owner": "__main__",
            "file": "/w/train.py",
            "count": 4,
            "bytes": 9 * MiB,
            "grad_bytes": 0,
            "with_graph": 0,
            "shapes": [[]],
        },
    ]
    data = {"iterations_are": "optimizer steps", "iteration": step, "census": {"holders": holders}}
    return Event(t, "census", data)


P = profile(events=[census(1.0, 5, 5), census(2.0, 10, 10), census(4.0, 40, 40)])


def test_contents_list_each_holder_largest_first() -> None:
    rows = contents(pick(P, "last"))
    assert [r.id for r in rows] == ["local:train:kept", "global:__main__:model"]
    assert rows[0].bytes == 40 * MiB and rows[0].with_graph == 40 and rows[0].place == "train.py:9"
    assert rows[1].shapes == ("scalar",)


def test_changes_show_what_grew_and_leave_out_what_did_not() -> None:
    [change] = changes(pick(P, "first"), pick(P, "last"))
    assert change.row.id == "local:train:kept"
    assert (change.count_delta, change.bytes_delta) == (35, 35 * MiB)


def test_a_census_is_picked_by_position_or_iteration_with_a_clear_error() -> None:
    assert pick(P, "1").iteration == 10 and pick(P, "step:40").t == 4.0
    with pytest.raises(ValueError, match="censuses were taken at 5, 10, 40"):
        pick(P, "step:7")
    with pytest.raises(ValueError, match="first, last, oom, an index from 0 to 2 or step:N"):
        pick(P, "middle")
    with pytest.raises(ValueError, match="no censuses"):
        pick(profile(), "last")


def test_the_census_at_an_out_of_memory_error_is_picked_by_oom_and_named_for_it() -> None:
    at_error = census(4.5, 40, kept=90)
    at_error.data["at"] = "oom"
    run = profile(events=[*P.events, at_error], end_t=5.0)
    chosen = pick(run, "oom")
    assert chosen.at_error and chosen.t == 4.5
    assert census_label(chosen) == "the out-of-memory error (4.50 s)"
    assert pick(run, "step:40").t == 4.0  # the iteration's own census, not the error's
    assert format_contents(run, "oom", since="step:40").startswith(
        "What changed from optimizer step 40 (4.00 s) to the out-of-memory error (4.50 s)"
    )
    assert contents_json(run, "oom")["census"]["at"] == "oom"
    with pytest.raises(ValueError, match="no census was taken at an out-of-memory error"):
        pick(P, "oom")


def test_the_text_names_the_moment_and_the_holders() -> None:
    text = format_contents(P, "last", since="first")
    assert text.startswith("What changed from optimizer step 5 (1.00 s) to optimizer step 40")
    assert "+35.00 MiB" in text and "`kept` (list, local of `train()` in train.py)" in text
    assert "model" not in text  # unchanged
