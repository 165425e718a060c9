"""A child's end in a profile: the sources that tell it, in any order, give one end and one
status (profile/replay.py), and the rules child-killed and child-failed name the child and
how it ended, while run-failed stays about the target and the ranks. On event streams written
as the recorder and the agents write them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from memsight.profiler import protocol
from memsight.profiler.diagnosis import diagnose, finding_to_json
from memsight.profiler.diagnosis.config import DEFAULT_CONFIG
from memsight.profiler.diagnosis.rules import child_failed, child_killed, run_failed
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.replay import ProfileBuilder
from memsight.profiler.profile.summary import summarize_processes, to_json
from memsight.profiler.protocol import FrameReader
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.recorder.session import PROCS_RAM_TABLE

T0 = 5_000_000_000
S = 1_000_000_000
TARGET, CHILD = 100, 101
COMMAND = ["/usr/bin/python3", "train.py"]
TRACEBACK = [
    ["/usr/lib/python3.11/multiprocessing/process.py", 108, "run", "self._target()"],
    ["/work/train.py", 12, "load_shard", "raise ValueError('bad shard 3')"],
]


def event(t_s: float, type_: str, **data: Any) -> dict[str, Any]:
    return {"t": T0 + int(t_s * S), "type": type_, **data}


def child_life(role: str | None = None) -> list[dict[str, Any]]:
    """The target, and one forked child that said hello at 1 s."""
    events = [
        event(0.0, "process", proc=0, pid=TARGET, parent=1, cmdline=COMMAND),
        event(
            1.0,
            "process",
            proc=1,
            pid=CHILD,
            parent=TARGET,
            cmdline=COMMAND,
            started_ns=T0 + int(0.999 * S),
            forked=True,
        ),
    ]
    if role is not None:
        events.append(event(1.1, "child_role", pid=CHILD, role=role, name="pt_data_worker"))
    return events


def build(events: list[dict[str, Any]], peak: int = 50 << 20) -> Profile:
    ram = TableBuffer(PROCS_RAM_TABLE)
    for i in range(10):  # the child's RSS, rising to `peak`, as the recorder samples it
        t = T0 + S + i * S // 10
        rss = peak * (i + 1) // 10
        ram.add((t, 1, rss, rss, 0, 8 << 30))
    frames = [
        protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "train.py"}),
        PROCS_RAM_TABLE.frame(),
        ram.drain(),
        protocol.encode_json_frame(protocol.EVENTS, sorted(events, key=lambda e: e["t"])),
        protocol.encode_json_frame(
            protocol.EVENTS,
            [event(5.0, "exit", exit_code=0, signal=None), event(5.1, "recording_end")],
        ),
    ]
    builder = ProfileBuilder()
    reader = FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
    reader.feed(b"".join(f for f in frames if f))
    for kind, payload in reader.frames():
        builder.feed(kind, payload)
    builder.flush()
    return builder.profile


KILL_SOURCES = [
    event(2.0, "agent_disconnected", proc=1, pid=CHILD),
    event(2.01, "child_exited", pid=CHILD),  # the recorder found it gone, its status reaped
    event(2.05, "child_reaped", pid=CHILD, exit_code=None, signal=9),  # by its parent
]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_the_end_and_status_are_the_same_whatever_order_their_sources_come_in(
    order: tuple[int, ...],
) -> None:
    profile = build(child_life() + [KILL_SOURCES[i] for i in order])
    process = profile.subprocesses[1].process
    assert process.started == pytest.approx(0.999)  # the fork, as its agent said
    assert process.ended == pytest.approx(2.0)  # the earliest sighting
    assert (process.exit_code, process.signal) == (None, 9)
    assert process.ended_by == "killed by signal 9"


def test_a_childs_own_os_exit_tells_its_status_when_no_parent_reaps_it() -> None:
    profile = build(
        [
            *child_life(),
            event(1.5, "os_exit", proc=1, exit_code=3),
            event(1.51, "agent_disconnected", proc=1, pid=CHILD),
        ]
    )
    process = profile.subprocesses[1].process
    assert (process.exit_code, process.signal, process.ended) == (3, None, 1.5)


def test_a_status_reaped_by_another_process_than_its_parent_is_not_taken() -> None:
    other = event(0.5, "process", proc=2, pid=555, parent=TARGET, cmdline=COMMAND)
    wrong = event(2.0, "child_reaped", proc=2, pid=CHILD, exit_code=0, signal=None)
    profile = build([*child_life(), other, wrong])
    assert profile.subprocesses[1].process.exit_code is None


def test_a_sigkilled_dataloader_worker_gets_the_kill_finding_with_its_peak_and_what_to_check() -> (
    None
):
    profile = build(child_life(role=protocol.CHILD_ROLE_DATALOADER_WORKER) + KILL_SOURCES)
    diagnosis = diagnose(profile)
    (finding,) = [f for f in diagnosis.findings if f.rule == child_killed.RULE_ID]
    assert finding.severity == "critical"
    assert finding.title == "A DataLoader worker was killed by signal 9 (SIGKILL)"
    assert f"DataLoader worker pid {CHILD}" in finding.evidence.text
    assert "50.00 MiB" in finding.evidence.text and "dmesg" in finding.evidence.text
    assert "OOM killer" in finding.explanation and "num_workers" in finding.explanation
    assert finding.evidence.numbers["peak_ram_bytes"] == 50 << 20
    assert finding.fixes[0] == "child-out-of-memory"
    assert finding_to_json(finding)["process"] == {"proc": 1, "pid": CHILD, "rank": None}
    assert not [f for f in diagnosis.findings if f.rule == run_failed.RULE_ID]


@pytest.mark.parametrize(("signal", "fires"), [(15, False), (2, False), (11, True), (6, True)])
def test_a_child_stopped_on_purpose_is_left_alone_and_a_crash_is_named(
    signal: int, fires: bool
) -> None:
    ended = event(2.0, "child_reaped", pid=CHILD, exit_code=None, signal=signal)
    found = child_killed.check(build([*child_life(), ended]).subprocesses[1], DEFAULT_CONFIG)
    assert bool(found) == fires
    if fires:
        assert "crashed with SIG" in found[0].title


def uncaught(t_s: float, exc_type: str = "builtins.ValueError", **extra: Any) -> dict[str, Any]:
    return event(
        t_s,
        "exception",
        proc=1,
        exc_id=1,
        exc_type=exc_type,
        message="bad shard 3",
        traceback=TRACEBACK,
        uncaught=True,
        where="process",
        oom=None,
        **extra,
    )


def test_a_child_that_raised_after_its_work_gets_its_exception_and_line_never_before_any_work() -> (
    None
):
    ends = [uncaught(1.8), event(1.9, "child_reaped", pid=CHILD, exit_code=1, signal=None)]
    profile = build(child_life() + ends)
    diagnosis = diagnose(profile)
    rules = [f.rule for f in diagnosis.findings]
    assert rules == [child_failed.RULE_ID]  # not run-failed: the target ended well
    (finding,) = diagnosis.findings
    assert finding.title == "A child process failed: ValueError"
    assert "ValueError: bad shard 3 at train.py:12 in load_shard()" in finding.evidence.text
    assert "before doing any work" not in finding.title + finding.evidence.text
    assert finding.where and (finding.where[0].file, finding.where[0].line) == (
        "/work/train.py",
        12,
    )
    numbers = finding.evidence.numbers
    assert (numbers["exception"], numbers["line"], numbers["exit_code"]) == (
        "builtins.ValueError",
        12,
        1,
    )


def test_an_exit_status_without_exception_is_named_and_a_clean_exit_is_quiet() -> None:
    failed = build([*child_life(), event(1.5, "child_reaped", pid=CHILD, exit_code=3)])
    (finding,) = child_failed.check(failed.subprocesses[1], DEFAULT_CONFIG)
    assert finding.title == "A child process exited with status 3"
    clean = build([*child_life(), event(1.5, "child_reaped", pid=CHILD, exit_code=0)])
    assert child_failed.check(clean.subprocesses[1], DEFAULT_CONFIG) == []


def test_out_of_memory_and_ctrl_c_in_a_child_are_not_child_failed() -> None:
    oom = uncaught(1.8, exc_type="builtins.MemoryError")
    oom["oom"] = "cpu"
    ctrl_c = uncaught(1.8, exc_type="builtins.KeyboardInterrupt")
    for exc in (oom, ctrl_c):
        profile = build([*child_life(), exc, event(1.9, "child_reaped", pid=CHILD, exit_code=1)])
        assert child_failed.check(profile.subprocesses[1], DEFAULT_CONFIG) == []


def test_a_rank_keeps_run_failed_and_gets_no_child_finding() -> None:
    events = child_life()
    events[1]["rank"] = 1
    ends = [uncaught(1.8), event(1.9, "child_reaped", pid=CHILD, exit_code=1)]
    rules = {f.rule for f in diagnose(build(events + ends)).findings}
    assert rules == {run_failed.RULE_ID}


def test_report_json_lists_each_childs_command_start_end_and_exception() -> None:
    ends = [uncaught(1.8), event(1.9, "child_reaped", pid=CHILD, exit_code=1)]
    profile = build(child_life() + ends)
    (target, child) = to_json(profile)["processes"]
    assert child["command"] == COMMAND
    assert child["started_s"] == pytest.approx(0.999)
    assert child["ended_s"] == pytest.approx(1.9)
    assert child["ended_by"] == "exit code 1"
    assert child["exception"] == {
        "type": "builtins.ValueError",
        "message": "bad shard 3",
        "file": "/work/train.py",
        "line": 12,
    }
    assert target["ended_by"] == "exit code 0" and target["exception"] is None
    # Older keys stay as they were
    assert (child["exit_code"], child["signal"], child["pid"]) == (1, None, CHILD)
    assert [p.ended_by for p in summarize_processes(profile)] == ["exit code 0", "exit code 1"]
