"""A job's processes in a profile file (profile/processes.py): written as the recorder writes
them, read back as one Profile per process on the run's clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.profile.header import FILE_HEADER
from memsight.profiler.profile.processes import job_processes
from memsight.profiler.profile.storage import ProfileError, load_profile
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import RAM_TABLE, STEP_TABLE, TableSchema
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.recorder.session import PROCS_RAM_TABLE

T0 = 1_000_000_000_000
MS = 1_000_000
PROCS_STEPS = TableSchema(
    170, "procs_steps", [STEP_TABLE.columns[0], ("proc", "I"), *STEP_TABLE.columns[1:]]
)


def events(*items: dict[str, Any]) -> bytes:
    return protocol.encode_json_frame(protocol.EVENTS, list(items))


def rows(schema: TableSchema, *values: tuple[int, ...]) -> bytes:
    table = TableBuffer(schema)
    for row in values:
        table.add(row)
    return schema.frame() + table.drain()


def write(path: Path, *frames: bytes, processes: bool = True) -> Path:
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "launch.py"}))
    if processes:
        writer.mark_processes()
    for frame in frames:
        writer.write(frame)
    writer.close()
    return path


def proc_step(proc: int, t_ms: int, index: int) -> tuple[int, ...]:
    """A procs_steps row: t, proc, end, index, optimizer, cleared, the rest -1 (not read)."""
    width = len(STEP_TABLE.columns)
    t = T0 + t_ms * MS
    return (t, proc, t + MS, index, 0, 0, *([-1] * (width - 5)))


def job(tmp_path: Path) -> Path:
    """A launcher (pid 100) with two ranks (pids 101, 102) and a DataLoader worker of rank 1
    (pid 103, forked: no agent), each rank with its own RAM and optimizer steps."""
    return write(
        tmp_path / "job.memsight",
        rows(RAM_TABLE, *((T0 + i * 10 * MS, 50 << 20, 50 << 20, 0, 1 << 30) for i in range(5))),
        events(
            {"t": T0 + 5 * MS, "type": "process", "proc": 0, "pid": 100, "parent": 1},
            {"t": T0 + 6 * MS, "type": "process", "proc": 1, "pid": 101, "parent": 100, "rank": 0},
            {"t": T0 + 7 * MS, "type": "process", "proc": 2, "pid": 102, "parent": 100, "rank": 1},
            {"t": T0 + 8 * MS, "type": "child_started", "pid": 101, "ppid": 100, "role": "other"},
            {"t": T0 + 8 * MS, "type": "child_started", "pid": 102, "ppid": 100, "role": "other"},
            {
                "t": T0 + 9 * MS,
                "type": "child_started",
                "pid": 103,
                "ppid": 102,
                "role": "dataloader-worker",
            },
            {"t": T0 + 9 * MS, "type": "torch_imported", "version": "2.13.0", "proc": 2},
            {"t": T0 + 9 * MS, "type": "name", "id": 1, "name": "SGD", "proc": 2},
        ),
        rows(
            PROCS_RAM_TABLE,
            *((T0 + i * 10 * MS, 1, 200 << 20, 210 << 20, 0, 1 << 30) for i in range(3)),
            *((T0 + i * 10 * MS, 2, 300 << 20, 320 << 20, 5 << 20, 1 << 30) for i in range(4)),
        ),
        rows(
            PROCS_STEPS,
            *(proc_step(1, 20 + i, i + 1) for i in range(3)),
            *(proc_step(2, 30 + i, i + 1) for i in range(4)),
        ),
        events(
            {"t": T0 + 50 * MS, "type": "child_exited", "pid": 101, "exit_code": 0, "signal": None},
            {"t": T0 + 51 * MS, "type": "child_exited", "pid": 102, "exit_code": None, "signal": 9},
            {"t": T0 + 60 * MS, "type": "exit", "exit_code": 1, "signal": None},
            {"t": T0 + 61 * MS, "type": "recording_end"},
        ),
    )


def test_each_process_is_a_profile_of_its_own_on_the_runs_clock(tmp_path: Path) -> None:
    profile = load_profile(job(tmp_path))
    assert profile.process.pid == 100 and profile.process.rank is None
    assert sorted(profile.subprocesses) == [1, 2]
    rank0, rank1 = profile.subprocesses[1], profile.subprocesses[2]
    assert (rank0.process.pid, rank0.process.rank, rank0.process.parent) == (101, 0, 100)
    assert (rank1.process.label, rank1.process.role) == ("rank 1", "rank")
    # Their own RAM, and their own steps: nothing of theirs is in the launcher's tables
    assert rank0.ram is not None and list(rank0.ram["rss"]) == [200 << 20] * 3
    assert rank1.ram is not None and list(rank1.ram["children"]) == [5 << 20] * 4
    assert rank0.iterations == 3 and rank1.iterations == 4
    assert profile.iterations == 0 and "procs_ram" not in profile.tables
    assert rank1.ram.t[0] == pytest.approx(0.0) and rank1.steps is not None
    assert rank1.steps.t[0] == pytest.approx(0.030)
    # Their events and names are theirs; the launcher keeps its own
    assert rank1.info.torch_version == "2.13.0" and profile.info.torch_version is None
    assert rank1.name(1) == "SGD" and profile.name(1) == "?"
    assert not any(e.get("proc") for e in profile.events if e.type != "process")
    # How each ended: the recorder's reading of the zombie, and the target's exit
    assert rank0.process.exit_code == 0 and rank0.process.ended == pytest.approx(0.050)
    assert (rank1.process.exit_code, rank1.process.signal) == (None, 9)
    assert profile.process.exit_code == 1 and profile.process.ended == pytest.approx(0.060)
    assert profile.complete and rank0.complete and rank1.complete


def test_a_forked_worker_belongs_to_the_rank_that_forked_it(tmp_path: Path) -> None:
    launcher, rank0, rank1 = job_processes(load_profile(job(tmp_path)))
    assert [v.process.proc for v in (launcher, rank0, rank1)] == [0, 1, 2]
    assert set(rank1.children) == {103} and not rank0.children
    assert set(launcher.children) == {101, 102}  # the ranks: their own children are theirs


def test_a_single_process_run_is_one_process(tmp_path: Path) -> None:
    path = write(
        tmp_path / "one.memsight",
        rows(RAM_TABLE, (T0, 1, 1, 0, 1)),
        events({"t": T0, "type": "exit", "exit_code": 0}),
        processes=False,
    )
    profile = load_profile(path)
    assert job_processes(profile) == [profile]
    assert not profile.subprocesses and profile.process.proc == 0
    assert FILE_HEADER.unpack_from(path.read_bytes())[1] == 1  # older releases still open it


def test_a_job_file_says_format_3_so_older_releases_refuse_it(tmp_path: Path) -> None:
    data = job(tmp_path).read_bytes()
    assert FILE_HEADER.unpack_from(data)[1] == 3


@pytest.mark.parametrize("proc", [-1, 5000, "1", True])
def test_an_event_of_an_impossible_process_is_a_damaged_file(tmp_path: Path, proc: object) -> None:
    path = write(tmp_path / "bad.memsight", events({"t": T0, "type": "exception", "proc": proc}))
    with pytest.raises(ProfileError, match="process"):
        load_profile(path)


def test_rows_of_an_impossible_process_are_a_damaged_file(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.memsight", rows(PROCS_RAM_TABLE, (T0, 0, 1, 1, 0, 1)))
    with pytest.raises(ProfileError, match="process 0"):
        load_profile(path)


def test_a_snapshot_of_a_job_keeps_its_processes(tmp_path: Path) -> None:
    profile = load_profile(job(tmp_path))
    copy = profile.snapshot()
    assert sorted(copy.subprocesses) == [1, 2]
    assert copy.subprocesses[2].process.rank == 1
    assert np.array_equal(copy.subprocesses[2].ram["rss"], profile.subprocesses[2].ram["rss"])  # type: ignore[index]


def test_report_json_lists_every_process_with_its_peak_iterations_and_end(tmp_path: Path) -> None:
    from memsight.profiler.profile.summary import format_text, to_json

    profile = load_profile(job(tmp_path))
    processes = to_json(profile)["processes"]
    assert [(p["proc"], p["pid"], p["rank"], p["role"]) for p in processes] == [
        (0, 100, None, "other"),
        (1, 101, 0, "rank"),
        (2, 102, 1, "rank"),
    ]
    launcher, rank0, rank1 = processes
    assert (launcher["iterations"], rank0["iterations"], rank1["iterations"]) == (0, 3, 4)
    assert (rank0["peak_ram_bytes"], rank1["peak_ram_bytes"]) == (210 << 20, 320 << 20)
    assert rank0["peak_gpu_allocated_bytes"] is None
    assert (launcher["exit_code"], rank0["exit_code"], rank1["signal"]) == (1, 0, 9)
    assert rank0["parent"] == 100
    text = format_text(profile, "job.memsight")
    assert "Processes of the job (3)" in text
    assert "rank 1" in text and "killed by signal 9" in text


def test_a_single_process_report_has_one_process_and_no_job_table(tmp_path: Path) -> None:
    from memsight.profiler.profile.summary import format_text, to_json

    path = write(
        tmp_path / "one.memsight",
        rows(RAM_TABLE, (T0, 5 << 20, 6 << 20, 0, 1)),
        events({"t": T0 + MS, "type": "exit", "exit_code": 0}),
        processes=False,
    )
    profile = load_profile(path)
    (only,) = to_json(profile)["processes"]
    assert (only["proc"], only["role"], only["peak_ram_bytes"], only["exit_code"]) == (
        0,
        "other",
        6 << 20,
        0,
    )
    assert "Processes of the job" not in format_text(profile, "one.memsight")
