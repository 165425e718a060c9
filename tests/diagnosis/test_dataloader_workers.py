"""dataloader-worker-growth on synthetic profiles: which children are DataLoader workers, and
the rise of a worker's memory to a plateau (or steadily) measured as levels, the same in every
run.

The shapes are those the recorder reads from real workers (examples/dataloader_copy_on_access.py,
examples/clean_spawn_processes.py, examples/clean_short_eval_loader.py): USS readings every
0.25-0.45 s, RSS flat while pages are copied, RSS rising with fresh allocations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from memsight.profiler.diagnosis import DEFAULT_CONFIG, diagnose
from memsight.profiler.diagnosis.rules import ALL_RULES
from memsight.profiler.diagnosis.rules.dataloader_worker_growth import (
    child_lives,
    dataloader_workers,
)
from memsight.profiler.profile.model import Event, Profile, SampleTable
from tests.factories import MiB, profile, table

RULE = {rule.RULE_ID: rule for rule in ALL_RULES}["dataloader-worker-growth"]
WORKER = "-".join(("dataloader", "worker"))  # the role (a hyphenated literal reads as a fix id)

Curve = Callable[[np.ndarray], np.ndarray]


def rise_to_plateau(first: float, plateau: float, rise_s: float) -> Curve:
    """Copy-on-access with shuffled reads: fast at first, then every page has been touched."""
    return lambda t: first + (plateau - first) * (1 - np.exp(-3 * t / rise_s))


def steady(first: float, per_s: float) -> Curve:
    return lambda t: first + per_s * t


def readings(
    rng: np.random.Generator, start: float, life_s: float, gap: tuple[float, float] = (0.25, 0.45)
) -> np.ndarray:
    """Times of USS readings over a life, irregular like a budgeted reader's."""
    t = [start + rng.uniform(0.0, 0.05)]
    while t[-1] < start + life_s:
        t.append(t[-1] + rng.uniform(*gap))
    return np.array(t[:-1])


def workers_profile(
    workers: list[tuple[int, float, float, Curve, Curve]],
    seed: int = 0,
    events: list[Event] | None = None,
    spikes: bool = False,
    **info: Any,
) -> Profile:
    """One life per (pid, start, life_s, uss(t), rss(t)), t since the worker's start."""
    rng = np.random.default_rng(seed)
    rows = []
    for pid, start, life_s, uss, rss in workers:
        t = readings(rng, start, life_s)
        since = t - start
        u = uss(since) + rng.normal(0, 0.5 * MiB, len(t))
        if spikes:  # a batch in flight now and then: one reading in 8 is 40 MiB higher
            u[int(rng.integers(3, 8)) :: 8] += 40 * MiB
        rows += [(a, pid, int(b), int(c)) for a, b, c in zip(t, u, rss(since), strict=True)]
    rows.sort()
    t, pids, uss_col, rss_col = (np.array(c) for c in zip(*rows, strict=True))
    children = table("children", t, pid=pids, uss=uss_col, rss=rss_col, pss=uss_col)
    return profile(children, events=events or [], **info)


def started(pid: int, t: float, name: str, role: str | None = WORKER) -> Event:
    data: dict[str, object] = {"pid": pid, "ppid": 1, "name": name, "cmdline": ["python"]}
    if role is not None:
        data["role"] = role
    return Event(t, "child_started", data)


def exited(pid: int, t: float) -> Event:
    return Event(t, "child_exited", {"pid": pid})


def flat(level: float) -> Curve:
    return lambda t: np.full(len(t), level)


FORKED_RSS = flat(560 * MiB)  # a forked worker's RSS: the parent's pages, shared


def copy_on_access_run(seed: int) -> Profile:
    """The reported case: two workers over a 1M-entry dict, USS 30 -> 530 MiB in ~4 s, then
    held for the rest of the epoch."""
    curve = rise_to_plateau(30 * MiB, 530 * MiB, rise_s=4.0)
    events = [started(300, 1.0, "pt_data_worker"), started(301, 1.0, "pt_data_worker")]
    events += [exited(300, 20.0), exited(301, 20.0)]
    return workers_profile(
        [(300, 1.0, 19.0, curve, FORKED_RSS), (301, 1.0, 19.0, curve, FORKED_RSS)],
        seed=seed,
        events=events,
        spikes=True,
    )


# rise to a plateau, steady growth ----------------------------------------------------------


def test_rise_to_a_plateau_reports_the_real_rise_from_first_level_to_plateau() -> None:
    [finding] = RULE.check(copy_on_access_run(seed=1), DEFAULT_CONFIG)
    numbers = finding.evidence.numbers
    assert numbers["workers"] == 2
    assert numbers["shape"] == "plateau"
    assert numbers["first_level_bytes"] == pytest.approx(30 * MiB, abs=8 * MiB)
    assert numbers["plateau_bytes"] == pytest.approx(530 * MiB, rel=0.02)  # spikes left out
    assert numbers["rise_bytes"] == pytest.approx(500 * MiB, rel=0.03)
    assert numbers["mean_growth_bytes"] == pytest.approx(500 * MiB, rel=0.03)
    assert numbers["copied_bytes"] == pytest.approx(2 * 500 * MiB, rel=0.05)
    rise_start, rise_end = numbers["rise_start_s"], numbers["rise_end_s"]
    assert isinstance(rise_start, float) and isinstance(rise_end, float)
    assert 1.0 <= rise_start < 1.2 and 3.0 < rise_end < 5.5  # 90 % of it within ~3 s
    assert finding.evidence.start_s == pytest.approx(rise_start, abs=0.1)
    assert "rose from" in finding.evidence.text and "then held that level" in finding.evidence.text
    assert "RSS flat" in finding.evidence.text


def test_rise_to_a_plateau_is_found_with_the_same_numbers_in_every_run() -> None:
    """Runs differ in when readings land and in noise; the verdict and the rise must not (a
    straight-line fit found this in 2 runs of 4, with a 'growth' of 139 MiB)."""
    rises = []
    for seed in range(12):
        findings = RULE.check(copy_on_access_run(seed), DEFAULT_CONFIG)
        assert len(findings) == 1, seed
        rises.append(findings[0].evidence.numbers["rise_bytes"])
    assert max(rises) - min(rises) < 0.05 * 500 * MiB  # the first reading lands within 0.05 s


def test_steady_copying_through_the_epoch_fires_as_still_growing() -> None:
    p = workers_profile(
        [(300, 1.0, 12.0, steady(20 * MiB, 15 * MiB), FORKED_RSS)],
        events=[started(300, 1.0, "pt_data_worker")],
    )
    [finding] = RULE.check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["shape"] == "growing"
    assert finding.evidence.numbers["rise_bytes"] == pytest.approx(15 * MiB * 12, rel=0.1)
    assert "still growing" in finding.evidence.text


def test_steady_allocation_growth_fires_too() -> None:
    """A worker that keeps caching what it reads: RSS climbs with USS, to the end."""
    growing = steady(20 * MiB, 10 * MiB)
    p = workers_profile(
        [(300, 1.0, 15.0, growing, lambda t: 300 * MiB + growing(t))],
        events=[started(300, 1.0, "pt_data_worker")],
    )
    [finding] = RULE.check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["shape"] == "growing"


@pytest.mark.parametrize(
    "uss, rss",
    [
        # buffers allocated once early on (RSS rises with USS), then held
        (rise_to_plateau(20 * MiB, 150 * MiB, 1.0), rise_to_plateau(300 * MiB, 430 * MiB, 1.0)),
        # copied, but only a little: under worker_growth_min_bytes
        (rise_to_plateau(20 * MiB, 70 * MiB, 2.0), FORKED_RSS),
        # flat
        (flat(40 * MiB), FORKED_RSS),
    ],
    ids=["allocated-once", "small-copy", "flat"],
)
def test_quiet_on_workers_whose_memory_does_not_grow_by_copying(uss: Curve, rss: Curve) -> None:
    p = workers_profile([(300, 1.0, 10.0, uss, rss)], events=[started(300, 1.0, "pt_data_worker")])
    assert RULE.check(p, DEFAULT_CONFIG) == []


def test_a_worker_with_too_few_readings_is_not_judged() -> None:
    """An evaluation worker of 0.2 s: one or two readings."""
    p = workers_profile(
        [(300, 1.0, 0.5, steady(10 * MiB, 400 * MiB), FORKED_RSS)],
        events=[started(300, 1.0, "pt_data_worker"), exited(300, 1.5)],
    )
    assert RULE.check(p, DEFAULT_CONFIG) == []


# which children are DataLoader workers -------------------------------------------------------

IMPORTING_TORCH = rise_to_plateau(10 * MiB, 320 * MiB, 1.5)  # a fresh interpreter importing torch


def test_torchrun_ranks_and_spawned_processes_are_not_workers() -> None:
    """Ranks import torch (their USS rises by ~300 MiB) and read their data: never judged,
    even when their USS rises with RSS flat."""
    events = [
        started(400, 0.5, "python3", role="other"),
        started(401, 0.5, "python3", role="other"),
        started(402, 0.5, "python3", role="other"),
    ]
    p = workers_profile(
        [
            (400, 0.5, 12.0, IMPORTING_TORCH, lambda t: 200 * MiB + IMPORTING_TORCH(t)),
            (401, 0.5, 12.0, IMPORTING_TORCH, lambda t: 200 * MiB + IMPORTING_TORCH(t)),
            (402, 0.5, 12.0, rise_to_plateau(30 * MiB, 530 * MiB, 4.0), FORKED_RSS),
        ],
        events=events,
    )
    assert dataloader_workers(p, DEFAULT_CONFIG) == []
    assert RULE.check(p, DEFAULT_CONFIG) == []
    assert "dataloader-worker-growth" not in {f.rule for f in diagnose(p).findings}


def test_a_spawned_worker_is_judged_from_when_it_named_itself() -> None:
    """A spawn-context worker imports torch and unpickles the dataset before its loop starts
    (and names itself): that climb is not judged, what follows is."""
    events = [
        started(500, 1.0, "python3", role="other"),
        Event(3.0, "child_role", {"pid": 500, "role": WORKER, "name": "pt_data_worker"}),
    ]
    quiet = workers_profile(
        [(500, 1.0, 10.0, IMPORTING_TORCH, lambda t: 200 * MiB + IMPORTING_TORCH(t))],
        events=events,
    )
    [(life, since)] = dataloader_workers(quiet, DEFAULT_CONFIG)
    assert life.pid == 500 and since == 3.0
    assert RULE.check(quiet, DEFAULT_CONFIG) == []

    copying = rise_to_plateau(0.0, 400 * MiB, 3.0)

    def uss_then_copy(t: np.ndarray) -> np.ndarray:
        return IMPORTING_TORCH(t) + copying(np.maximum(t - 2.5, 0.0))  # first batch at 3.5 s

    fires = workers_profile(
        [(500, 1.0, 10.0, uss_then_copy, lambda t: 200 * MiB + IMPORTING_TORCH(t))],
        events=events,
    )
    [finding] = RULE.check(fires, DEFAULT_CONFIG)
    # the level torch and the dataset left, not the interpreter's first few MiB
    assert finding.evidence.numbers["first_level_bytes"] == pytest.approx(314 * MiB, rel=0.03)
    assert finding.evidence.numbers["rise_bytes"] == pytest.approx(400 * MiB, rel=0.05)


def test_profiles_without_recorded_roles_use_the_name_and_the_epochs() -> None:
    """Recordings made before roles were recorded: pt_data_worker by name; an unnamed child
    (torch before 2.5) when it started right after a DataLoader epoch with workers; children
    known only by their samples, as before."""
    curve, rss = rise_to_plateau(30 * MiB, 330 * MiB, 3.0), FORKED_RSS
    epoch = Event(4.9, "epoch", {"loader": 1, "index": 1, "num_workers": 2})
    p = workers_profile(
        [
            (600, 1.0, 12.0, curve, rss),  # named
            (601, 5.0, 12.0, curve, rss),  # unnamed, started with the epoch
            (602, 1.0, 12.0, curve, rss),  # unnamed, no epoch near: a helper
            (603, 1.0, 12.0, curve, rss),  # no events at all
        ],
        events=[
            started(600, 1.0, "pt_data_worker", role=None),
            started(601, 5.0, "python3", role=None),
            started(602, 1.0, "python3", role=None),
            epoch,
        ],
    )
    judged = {life.pid: since for life, since in dataloader_workers(p, DEFAULT_CONFIG)}
    assert sorted(judged) == [600, 601, 603]
    assert judged[600] == 1.5 and judged[601] == 5.5  # after worker_warmup_s
    [finding] = RULE.check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["workers"] == 3


def test_torch_before_2_5_does_not_name_its_workers_so_epochs_decide() -> None:
    curve = rise_to_plateau(30 * MiB, 330 * MiB, 3.0)
    events = [
        Event(0.9, "epoch", {"loader": 1, "index": 1, "num_workers": 1}),
        started(700, 1.0, "python3", role="other"),
    ]
    old = workers_profile([(700, 1.0, 12.0, curve, FORKED_RSS)], events=events)
    old.info.torch_version = "2.4.1+cpu"
    assert len(RULE.check(old, DEFAULT_CONFIG)) == 1
    new = workers_profile([(700, 1.0, 12.0, curve, FORKED_RSS)], events=events)
    new.info.torch_version = "2.13.0+cpu"
    assert RULE.check(new, DEFAULT_CONFIG) == []  # named workers: "other" is final


def test_a_reused_pid_is_a_new_life() -> None:
    """Non-persistent workers of two epochs may get the same pid: each life has its own levels,
    never one curve across both (the second life starting low must not hide a rise)."""
    first = rise_to_plateau(30 * MiB, 330 * MiB, 2.0)
    p = workers_profile(
        [(800, 1.0, 6.0, first, FORKED_RSS), (800, 8.0, 6.0, first, FORKED_RSS)],
        events=[
            started(800, 1.0, "pt_data_worker"),
            exited(800, 7.0),
            started(800, 8.0, "pt_data_worker"),
            exited(800, 14.0),
        ],
    )
    lives = child_lives(p)
    assert [(life.start, life.end) for life in lives] == [(1.0, 7.0), (8.0, 14.0)]
    [finding] = RULE.check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["workers"] == 2
    assert finding.evidence.numbers["rise_bytes"] == pytest.approx(300 * MiB, rel=0.05)


def test_silent_without_children_or_readings() -> None:
    assert RULE.check(Profile(), DEFAULT_CONFIG) == []
    empty = SampleTable("children", ["t", "pid", "rss", "uss", "pss", "swap"])
    assert RULE.check(profile(empty), DEFAULT_CONFIG) == []


# recorded streams, with roles and without ------------------------------------------------------


def recorded(with_roles: bool) -> Profile:
    """A profile decoded from frames, as a file or a live run gives it: one worker forked at
    1 s (first seen under the interpreter's name, named pt_data_worker 20 ms later), copying
    300 MiB; and a torchrun-like rank importing torch."""
    from memsight.profiler import protocol
    from memsight.profiler.profile.replay import ProfileBuilder
    from memsight.profiler.protocol import FrameReader
    from memsight.profiler.recorder.blocks import TableBuffer

    t0 = 5_000_000_000

    def ns(seconds: float) -> int:
        return t0 + round(seconds * 1e9)

    def child(pid: int, name: str, role: str) -> dict[str, object]:
        event: dict[str, object] = {"t": ns(1.0), "type": "child_started", "pid": pid}
        event.update(ppid=1, name=name, cmdline=["python3", "train.py"])
        if with_roles:
            event["role"] = role
        return event

    events = [child(11, "python3", "other"), child(12, "python3", "other")]
    if with_roles:
        events.append(
            {
                "t": ns(1.02),
                "type": "child_role",
                "pid": 11,
                "role": WORKER,
                "name": "pt_data_worker",
            }
        )
    events += [{"t": ns(12.0), "type": "child_exited", "pid": p} for p in (11, 12)]
    buffer = TableBuffer(protocol.CHILD_TABLE)
    copying = rise_to_plateau(5 * MiB, 305 * MiB, 3.0)
    for t in np.arange(1.03, 12.0, 0.4):
        buffer.add((ns(t), 11, 400 * MiB, int(copying(np.array([t - 1.03]))[0]), 0, 0))
        importing = int(IMPORTING_TORCH(np.array([t - 1.0]))[0])
        buffer.add((ns(t), 12, 200 * MiB + importing, importing, 0, 0))
    frames = [
        protocol.encode_json_frame(protocol.RUN, {"t0_ns": t0, "script": "train.py"}),
        protocol.CHILD_TABLE.frame(),
        protocol.encode_json_frame(protocol.EVENTS, events),
        buffer.drain(),
    ]
    reader = FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
    reader.feed(b"".join(frames))
    builder = ProfileBuilder()
    for kind, payload in reader.frames():
        builder.feed(kind, payload)
    builder.flush()
    return builder.profile


def test_roles_travel_in_the_recorded_events_and_decide() -> None:
    p = recorded(with_roles=True)
    assert set(p.children) == {11, 12}  # the children as before: roles add no format change
    assert [e.get("role") for e in p.events_of("child_role")] == [WORKER]
    [(life, since)] = dataloader_workers(p, DEFAULT_CONFIG)
    assert life.pid == 11 and since == pytest.approx(1.02)
    [finding] = RULE.check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["pids"] == "11"
    assert finding.evidence.numbers["rise_bytes"] == pytest.approx(300 * MiB, rel=0.03)


def test_a_recording_without_roles_still_loads_and_is_judged_as_before() -> None:
    """Files recorded before roles load as before. Children with the interpreter's name count
    as workers only when they started with a DataLoader epoch (here both, the rank too); the
    rank still does not fire: its rise came with its RSS, and stopped."""
    p = recorded(with_roles=False)
    assert set(p.children) == {11, 12}
    assert {life.pid for life, _ in dataloader_workers(p, DEFAULT_CONFIG)} == set()
    p.events.append(Event(0.99, "epoch", {"loader": 1, "index": 1, "num_workers": 1}))
    p.events.sort(key=lambda e: e.t)
    assert {life.pid for life, _ in dataloader_workers(p, DEFAULT_CONFIG)} == {11, 12}
    [finding] = RULE.check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["pids"] == "11"
