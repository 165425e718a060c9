"""`memsight merge` (profiler/profile/merge.py): nodes' profiles into one job on one clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsight.profiler import protocol
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import RAM_TABLE, TableSchema
from memsight.profiler.recorder.blocks import TableBuffer
from tests.node_files import MS, MiB, two_nodes
from tests.support import run_cli


def single(path: Path, host: str, start: str, t0: int, columns: int = 5) -> Path:
    """A one-process run: RAM rows at 0 and 1 s, no other process. `columns` > 5 adds
    columns to its ram table, as another memsight version might record."""
    writer = ProfileWriter(path)
    run = {"t0_ns": t0, "script": "one.py", "pid": 20, "hostname": host, "start_time": start}
    writer.write(protocol.encode_json_frame(protocol.RUN, run))
    extra = [(f"extra{i}", "Q") for i in range(columns - 5)]
    table = TableBuffer(TableSchema(1, "ram", [*RAM_TABLE.columns, *extra]))
    for s in range(2):
        table.add((t0 + s * 1000 * MS, 50 * MiB, 50 * MiB, 0, 1 << 30, *[7] * len(extra)))
    writer.write(table.schema.frame())
    writer.write(table.drain())
    writer.write(protocol.encode_json_frame(protocol.EVENTS, [{"t": t0, "type": "x"}]))
    writer.close()
    return path


def test_two_nodes_become_one_job_on_the_first_ones_clock(tmp_path: Path) -> None:
    a, b = two_nodes(tmp_path)
    done = run_cli("merge", a, b, "-o", tmp_path / "job.memsight", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "clock shifted" in done.stdout and "1 ms" in done.stdout
    job = load_profile(tmp_path / "job.memsight")
    # The first node's run is the job's: its target is process 0, its rank keeps number 1
    assert job.info.hostname == "node-a" and job.process.node == "node-a"
    rank0 = job.subprocesses[1]
    assert (rank0.process.rank, rank0.process.node, rank0.process.pid) == (0, "node-a", 11)
    # The second node's target and rank follow, named by their node
    target_b, rank1 = job.subprocesses[2], job.subprocesses[3]
    assert (target_b.process.pid, target_b.process.node, target_b.process.rank) == (
        10,
        "node-b",
        None,
    )
    assert (rank1.process.rank, rank1.process.node, rank1.process.label) == (
        1,
        "node-b",
        "rank 1 on node-b",
    )
    # Its times are on the job's clock: 2.5 s later than the same moments of the first node
    assert rank1.ram is not None and list(rank1.ram.t) == pytest.approx([2.5, 3.5, 4.5])
    assert list(rank1.ram["rss"]) == [700 * MiB] * 3
    assert target_b.ram is not None and list(target_b.ram["children"]) == [700 * MiB] * 3
    assert rank1.process.started == pytest.approx(2.6)
    assert [e.t for e in rank1.events_of("exception")] == pytest.approx([3.0])
    # How they ended comes along; the first node's children table stays its own
    assert rank1.process.exit_code == 1 and rank1.process.ended == pytest.approx(5.0)
    assert target_b.process.exit_code == 1 and target_b.process.ended == pytest.approx(5.5)
    assert set(job.children) == {11}
    merge = next(job.events_of("merge"))
    assert [i["hostname"] for i in merge.get("inputs")] == ["node-a", "node-b"]
    assert merge.get("alignment_error_ms") == 1.0


def test_merge_refuses_to_overwrite_and_names_an_unreadable_input(tmp_path: Path) -> None:
    a, b = two_nodes(tmp_path)
    out = tmp_path / "job.memsight"
    out.write_bytes(b"keep me")
    refused = run_cli("merge", a, b, "-o", out, cwd=tmp_path)
    assert refused.returncode == 2 and "exists" in refused.stderr and out.read_bytes() == b"keep me"
    assert run_cli("merge", a, b, "-o", a, cwd=tmp_path).returncode == 2
    (tmp_path / "bad.memsight").write_bytes(b"not a profile")
    bad = run_cli(
        "merge", a, tmp_path / "bad.memsight", "-o", tmp_path / "j2.memsight", cwd=tmp_path
    )
    assert bad.returncode == 1 and "bad.memsight" in bad.stderr
    assert bad.stderr.count("\n") == 1 and not (tmp_path / "j2.memsight").exists()
    assert run_cli("merge", a, b, "-o", out, "--force", cwd=tmp_path).returncode == 0


def test_one_process_profiles_merge_either_way_round(tmp_path: Path) -> None:
    a, b = two_nodes(tmp_path)
    one = single(tmp_path / "one.memsight", "node-c", "2026-11-24T09:59:59.000+00:00", 7 * MS)
    first = run_cli("merge", one, b, "-o", tmp_path / "j1.memsight", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    job = load_profile(tmp_path / "j1.memsight")
    assert job.info.script == "one.py" and job.process.node == "node-c"
    assert [p.process.node for p in job.subprocesses.values()] == ["node-b", "node-b"]
    # node-b started 3.5 s after node-c by the wall clock
    assert job.subprocesses[2].ram is not None
    assert list(job.subprocesses[2].ram.t) == pytest.approx([3.5, 4.5, 5.5])
    second = run_cli("merge", a, one, "-o", tmp_path / "j2.memsight", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    job = load_profile(tmp_path / "j2.memsight")
    alone = job.subprocesses[2]
    assert (alone.process.pid, alone.process.node, alone.process.label) == (
        20,
        "node-c",
        "pid 20 on node-c",
    )
    assert alone.ram is not None and list(alone.ram.t) == pytest.approx([-1.0, 0.0])


def test_a_merged_job_merged_again_keeps_every_process_node(tmp_path: Path) -> None:
    a, b = two_nodes(tmp_path)
    one = single(tmp_path / "one.memsight", "node-c", "2026-11-24T10:00:01.000+00:00", 7 * MS)
    assert run_cli("merge", a, b, "-o", tmp_path / "ab.memsight", cwd=tmp_path).returncode == 0
    assert run_cli("merge", one, "ab.memsight", "-o", "job.memsight", cwd=tmp_path).returncode == 0
    job = load_profile(tmp_path / "job.memsight")
    nodes = [job.process.node, *(p.process.node for p in job.subprocesses.values())]
    assert nodes == ["node-c", "node-a", "node-a", "node-b", "node-b"]
    # Still on one clock: node-b's rank, 2.5 s after node-a, which started 1 s before node-c
    rank1 = job.subprocesses[4]
    assert rank1.process.rank == 1
    assert rank1.ram is not None and list(rank1.ram.t) == pytest.approx([1.5, 2.5, 3.5])
    assert len(list(job.events_of("merge"))) == 1


def test_rows_the_job_cannot_hold_are_left_out_with_a_warning(tmp_path: Path) -> None:
    a, _b = two_nodes(tmp_path)
    wide = single(
        tmp_path / "wide.memsight", "node-w", "2026-11-24T10:00:00.000+00:00", 7 * MS, columns=6
    )
    done = run_cli("merge", a, wide, "-o", tmp_path / "job.memsight", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "memsight: warning:" in done.stderr and "'ram' left out" in done.stderr
    job = load_profile(tmp_path / "job.memsight")
    assert job.subprocesses[2].process.node == "node-w" and job.subprocesses[2].ram is None


def test_merge_usage_errors_and_inputs_that_cannot_be_aligned(tmp_path: Path) -> None:
    a, b = two_nodes(tmp_path)
    no_out = run_cli("merge", a, b, cwd=tmp_path)
    assert no_out.returncode == 2 and "-o" in no_out.stderr
    # The output named through a link to an input's folder is still that input
    (tmp_path / "same").symlink_to(tmp_path)
    before = a.read_bytes()
    linked = run_cli("merge", a, b, "-o", tmp_path / "same" / "a.memsight", "--force", cwd=tmp_path)
    assert linked.returncode == 2 and "is one of the inputs" in linked.stderr
    assert a.read_bytes() == before
    # A start time without a zone cannot be put on another machine's clock
    naive = single(tmp_path / "naive.memsight", "n", "2026-11-24T10:00:00.000", 7 * MS)
    refused = run_cli("merge", a, naive, "-o", tmp_path / "j.memsight", cwd=tmp_path)
    assert refused.returncode == 1 and "no start time" in refused.stderr
    assert not (tmp_path / "j.memsight").exists()
