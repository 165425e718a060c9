"""A long run's rules are judged in threads (diagnosis.PARALLEL_RULES_SAMPLES): the findings,
their order and the rules that failed are those of the rules run one after another."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memsight.profiler import diagnosis, protocol
from memsight.profiler.diagnosis import diagnose, finding_to_json
from memsight.profiler.diagnosis.rules import ALL_RULES
from memsight.profiler.profile.model import Profile
from tests.factories import MiB, profile, ram, sample_profile, steps


def _profiles() -> list[Profile]:
    growing = steps(800 * MiB + 2 * MiB * np.arange(200), cleared=protocol.CLEARED_NONE)
    climbing = ram(30.0, lambda t: 500 * MiB + (20 * MiB * t).astype(np.int64))
    return [sample_profile(), profile(growing, climbing), profile(climbing)]


def _judged(p: Profile, monkeypatch: pytest.MonkeyPatch, threads: bool) -> str:
    with monkeypatch.context() as m:
        m.setattr(diagnosis, "PARALLEL_RULES_SAMPLES", 0 if threads else 1 << 62)
        result = diagnose(p)
    return json.dumps(
        [[finding_to_json(f) for f in result.findings], result.failed], sort_keys=True
    )


def test_rules_in_threads_find_what_they_find_one_after_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judged = [_judged(p, monkeypatch, threads=False) for p in _profiles()]
    # Something to compare: an out-of-memory error, growth, missing zero_grad, inference...
    assert sum(j.count('"rule": ') for j in judged) == 6
    assert [_judged(p, monkeypatch, threads=True) for p in _profiles()] == judged


def test_a_rule_that_raises_in_a_thread_is_named_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(profile: object, config: object) -> object:
        raise KeyError("rss")

    monkeypatch.setattr(ALL_RULES[1], "check", broken)
    p = _profiles()[1]
    serial = _judged(p, monkeypatch, threads=False)
    assert serial == _judged(p, monkeypatch, threads=True)
    assert f'"{ALL_RULES[1].RULE_ID}": "KeyError: \'rss\'"' in serial
