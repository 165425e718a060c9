"""A job of several processes in `memsight report`: the "processes" list of --json, the
per-rank table of the text and HTML reports, and each finding named by its process; on job
profiles written frame by frame as the recorder writes them (tests/job_files.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memsight.profiler.cli import main
from memsight.profiler.diagnosis import diagnose
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.profile.summary import to_json
from memsight.profiler.protocol import RAM_TABLE
from memsight.profiler.report.html import render_html
from tests.job_files import MiB, Rank, constant, load_job, oom, write_job

KEYS = {
    "proc",
    "pid",
    "parent",
    "rank",
    "role",
    "label",
    "iterations",
    "peak_ram_bytes",
    "peak_gpu_allocated_bytes",
    "exit_code",
    "signal",
    # How each process ran and ended: its command line, when, in words, and its exception.
    "command",
    "started_s",
    "ended_s",
    "ended_by",
    "exception",
}


def three_ranks(path: Path) -> Path:
    """Ranks connected in the order 2, 0, 1 (processes 1, 2, 3); rank 1 killed by signal 9
    after 20 of its 40 iterations, rank 0 holding 400 MiB more than the others."""
    return write_job(
        path,
        [
            Rank(2, constant(300 * MiB)),
            Rank(0, constant(700 * MiB)),
            Rank(1, constant(310 * MiB), end_s=5.1, exit_code=None, signal=9),
        ],
    )


def report(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    main(["report", *args])
    return capsys.readouterr().out


def test_report_json_lists_the_launcher_then_each_rank_by_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = report(capsys, "--json", str(three_ranks(tmp_path / "job.memsight")))
    processes = json.loads(out)["processes"]
    assert all(set(p) == KEYS for p in processes)
    assert [(p["proc"], p["pid"], p["rank"], p["role"], p["label"]) for p in processes] == [
        (0, 100, None, "other", "pid 100"),
        (2, 102, 0, "rank", "rank 0"),
        (3, 103, 1, "rank", "rank 1"),
        (1, 101, 2, "rank", "rank 2"),
    ]
    launcher, rank0, rank1, rank2 = processes
    assert [p["parent"] for p in (rank0, rank1, rank2)] == [100, 100, 100]
    assert [p["iterations"] for p in processes] == [0, 40, 20, 40]
    assert [p["peak_ram_bytes"] for p in processes] == [100 * MiB, 700 * MiB, 310 * MiB, 300 * MiB]
    assert all(p["peak_gpu_allocated_bytes"] is None for p in processes)  # no CUDA
    assert (rank0["exit_code"], rank0["signal"]) == (0, None)
    assert (rank1["exit_code"], rank1["signal"]) == (None, 9)
    assert launcher["exit_code"] == 1  # torchrun fails when one of its ranks does


def test_a_single_process_report_lists_the_target_alone(tmp_path: Path) -> None:
    from memsight.profiler import protocol
    from memsight.profiler.profile.writer import ProfileWriter
    from memsight.profiler.recorder.blocks import TableBuffer

    path = tmp_path / "one.memsight"
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": 10**12, "script": "t.py"}))
    table = TableBuffer(RAM_TABLE)
    for i in range(5):
        table.add((10**12 + i * 10**7, (50 + i) * MiB, (60 + i) * MiB, 0, 1 << 30))
    writer.write(RAM_TABLE.frame() + table.drain())
    writer.write(
        protocol.encode_json_frame(
            protocol.EVENTS, [{"t": 10**12 + 6 * 10**7, "type": "exit", "exit_code": 3}]
        )
    )
    writer.close()
    (only,) = to_json(load_profile(path))["processes"]
    assert set(only) == KEYS
    assert (only["proc"], only["rank"], only["role"], only["parent"]) == (0, None, "other", None)
    assert (only["peak_ram_bytes"], only["iterations"], only["exit_code"]) == (64 * MiB, 0, 3)
    assert only["peak_gpu_allocated_bytes"] is None


def test_the_text_report_has_a_row_per_process_in_rank_order_and_names_each_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = report(capsys, str(three_ranks(tmp_path / "job.memsight")))
    table = text.split("Processes of the job (4)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0].split() == [
        "process",
        "role",
        "peak",
        "RAM",
        "peak",
        "GPU",
        "iterations",
        "ended",
    ]
    rows = [re.split(r"\s{2,}", row.strip()) for row in table[1:]]
    assert rows == [
        ["pid 100 (target)", "other", "100.0 MiB", "—", "0", "exit code 1"],
        ["rank 0", "rank", "700.0 MiB", "—", "40", "exit code 0"],
        ["rank 1", "rank", "310.0 MiB", "—", "20", "killed by signal 9"],
        ["rank 2", "rank", "300.0 MiB", "—", "40", "exit code 0"],
    ]
    # Each finding says which process it is about
    assert re.search(r"\[WARNING\] rank 0: 2\.3 times the RAM of the other ranks", text)
    assert "[CRITICAL] pid 100: " in text  # the launcher's own exit status 1


def test_an_oom_on_one_rank_is_named_for_it_and_says_what_the_others_were_doing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ranks = [
        Rank(0, constant(300 * MiB)),
        Rank(1, constant(310 * MiB), events=[oom(5.1)], end_s=5.2, exit_code=1),
    ]
    text = report(capsys, str(write_job(tmp_path / "oom.memsight", ranks)))
    (oom_line,) = [line for line in text.splitlines() if "out-of-memory" in line]
    assert oom_line.startswith("1. [CRITICAL] rank 1: ")
    # Iteration 21 runs from 5.0 s: forward to 5.08 s, backward to 5.16 s
    assert "meanwhile rank 0 was in backward of iteration 21" in " ".join(text.split())


def test_a_one_process_report_has_no_job_table(tmp_path: Path) -> None:
    profile = load_job(tmp_path / "job.memsight", [Rank(0, constant(300 * MiB))])
    profile.subprocesses.clear()  # the launcher alone: a one-process run
    html = render_html(profile, diagnose(profile), "one.memsight")
    assert 'id="processes"' not in html and "Processes of the job" not in html


def test_the_html_report_has_the_per_rank_table_and_each_findings_process(
    tmp_path: Path,
) -> None:
    profile = load_profile(three_ranks(tmp_path / "job.memsight"))
    html = render_html(profile, diagnose(profile), "job.memsight")
    section = html.split('<section id="processes">', 1)[1].split("</section>", 1)[0]
    cells = [
        [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", section)
    ]
    assert [row[:2] for row in cells if row] == [
        ["pid 100 (target)", "other"],
        ["rank 0", "rank"],
        ["rank 1", "rank"],
        ["rank 2", "rank"],
    ]
    assert [c for c in cells if c][1][3:] == ["700.0 MiB", "—", "40", "exit code 0"]
    assert "rank 0: 2.3 times the RAM of the other ranks" in html
