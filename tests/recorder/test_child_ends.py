"""Every child a script starts, however it starts and however it ends, is a process of the job
with its own command line, start, end and exit status, and an abnormal end is a finding about
that child (profiler/agent/ends.py, the fork child's own connection in agent/client.py, the
recorder's side in recorder/session.py, the rules child-killed and child-failed).

The script starts 8 children one after the other: fork and spawn, each ending normally, by
os._exit(3), by a RuntimeError raised after doing some work, and by SIGKILL (as the OOM killer
sends it). Nothing here depends on when the recorder looks: a child says hello before any of
its code runs, and its status comes from its parent's join(), so the answer is the same on
every run; the run is recorded twice to show it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import run_cli, run_memsight, write_script

RAISE_LINE = 10  # the line of `raise RuntimeError` in SCRIPT
SCRIPT = """\
import multiprocessing as mp, os, signal, sys, time

def normal():
    time.sleep(0.2)
def hard():
    time.sleep(0.2); os._exit(3)
def boom():
    work = bytearray(10_000_000)
    time.sleep(0.2)
    raise RuntimeError("worker failed after its work")
def killed():
    work = bytearray(50_000_000)
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)

if __name__ == "__main__":
    for method in ("fork", "spawn"):
        ctx = mp.get_context(method)
        for f in (normal, hard, boom, killed):
            p = ctx.Process(target=f)
            p.start(); p.join()
            print(method, f.__name__, p.pid, p.exitcode, flush=True)
"""
CHILDREN = [(m, f) for m in ("fork", "spawn") for f in ("normal", "hard", "boom", "killed")]
EXPECTED = {  # (exit code, signal)
    "normal": (0, None),
    "hard": (3, None),
    "boom": (1, None),
    "killed": (None, 9),
}
RUNS = 2


def record(folder: Path) -> dict[str, Any]:
    folder.mkdir()
    script = write_script(folder, "kids.py", SCRIPT)
    result = run_memsight([str(script)], folder, timeout=240)
    assert result.returncode == 0, result.stderr
    pids = {}
    for line in result.stdout.splitlines():
        method, name, pid, code = line.split()
        pids[method, name] = int(pid)
        assert int(code) == (EXPECTED[name][0] if name != "killed" else -9)  # as plain python
    report = run_cli("report", "--json", str(result.profile_path), cwd=folder)
    assert report.returncode == 0, report.stderr
    text = run_cli("report", str(result.profile_path), cwd=folder)
    return {"pids": pids, "json": json.loads(report.stdout), "text": text.stdout}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    base = tmp_path_factory.mktemp("kids")
    return [record(base / f"run{i}") for i in range(RUNS)]


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
@pytest.mark.parametrize(("method", "name"), CHILDREN)
def test_every_child_is_a_process_of_the_job_with_its_command_start_end_and_status(
    runs: list[dict[str, Any]], method: str, name: str
) -> None:
    for run in runs:
        processes = {p["pid"]: p for p in run["json"]["processes"]}
        target = run["json"]["processes"][0]
        child = processes.get(run["pids"][method, name])
        assert child is not None, f"{method} {name} is not listed: {sorted(processes)}"
        assert child["parent"] == target["pid"]
        if method == "fork":
            assert child["command"] == target["command"]  # a fork child runs its parent's
        else:
            assert any("spawn_main" in arg for arg in child["command"]), child["command"]
        assert child["started_s"] < child["ended_s"] <= target["ended_s"] + 1.0
        assert (child["exit_code"], child["signal"]) == EXPECTED[name]
        if name == "killed":
            assert child["ended_by"] == "killed by signal 9"
        elif name == "boom":
            exc = child["exception"]
            assert exc["type"].endswith("RuntimeError")
            assert exc["message"] == "worker failed after its work"
            assert (Path(exc["file"]).name, exc["line"]) == ("kids.py", RAISE_LINE)
        else:
            assert child["exception"] is None


@pytest.mark.slow  # the module's recordings (`runs`): 7 s on a quiet 2-core machine
@pytest.mark.parametrize(("method", "name"), CHILDREN)
def test_an_abnormal_end_is_a_finding_about_that_child_and_never_about_the_run(
    runs: list[dict[str, Any]], method: str, name: str
) -> None:
    for run in runs:
        pid = run["pids"][method, name]
        findings = [f for f in run["json"]["findings"] if (f["process"] or {}).get("pid") == pid]
        rules = [f["rule"] for f in findings]
        assert "run-failed" not in [f["rule"] for f in run["json"]["findings"]]
        assert all("before doing any work" not in f["title"] for f in run["json"]["findings"])
        if name == "normal":
            assert rules == []
        elif name == "killed":
            assert rules == ["child-killed"]
            (finding,) = findings
            numbers = finding["evidence"]["numbers"]
            assert numbers["pid"] == pid and numbers["signal"] == 9
            assert numbers["peak_ram_bytes"] >= 50_000_000  # what it held before it died
            assert f"pid {pid}" in finding["evidence"]["text"]
            assert "dmesg" in finding["evidence"]["text"]
            assert finding["severity"] == "critical"
        else:
            assert rules == ["child-failed"]
            (finding,) = findings
            numbers = finding["evidence"]["numbers"]
            assert numbers["exit_code"] == EXPECTED[name][0]
            if name == "boom":
                assert numbers["exception"].endswith("RuntimeError")
                assert numbers["message"] == "worker failed after its work"
                assert numbers["line"] == RAISE_LINE
                assert f"kids.py:{RAISE_LINE}" in finding["evidence"]["text"]
            else:
                assert "status 3" in finding["title"]


@pytest.mark.slow  # the module's recordings (`runs`)
def test_the_text_report_shows_how_each_child_ended(runs: list[dict[str, Any]]) -> None:
    for run in runs:
        rows = run["text"].split("Processes of the job", 1)[1].split("\n\n", 1)[0]
        for (method, name), pid in run["pids"].items():
            (row,) = [line for line in rows.splitlines() if f"pid {pid} " in line]
            expected = {
                "normal": "exit code 0",
                "hard": "exit code 3",
                "boom": "exit code 1 (RuntimeError)",
                "killed": "killed by signal 9",
            }[name]
            assert row.rstrip().endswith(expected), (method, name, row)


def test_forty_short_fork_children_are_each_listed_with_their_status(tmp_path: Path) -> None:
    """Children that end at once, often before the recorder reads their hello: each is still
    a process of the job, with its exit code (its parent's waitpid, or its own os._exit)."""
    script = write_script(
        tmp_path,
        "forks.py",
        """\
        import os
        pids = []
        for i in range(40):
            pid = os.fork()
            if pid == 0:
                os._exit(i % 4)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        print(" ".join(map(str, pids)))
        """,
    )
    result = run_memsight([str(script)], tmp_path)
    assert result.returncode == 0, result.stderr
    pids = [int(p) for p in result.stdout.split()]
    report = run_cli("report", "--json", str(result.profile_path), cwd=tmp_path)
    processes = {p["pid"]: p for p in json.loads(report.stdout)["processes"]}
    for i, pid in enumerate(pids):
        assert pid in processes, f"child {i} (pid {pid}) is missing"
        assert (processes[pid]["exit_code"], processes[pid]["signal"]) == (i % 4, None)


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_a_dataloaders_forked_workers_are_processes_of_the_job_that_ended_well(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    script = write_script(
        tmp_path,
        "loader.py",
        """\
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        if __name__ == "__main__":
            data = TensorDataset(torch.randn(256, 8))
            loader = DataLoader(data, batch_size=16, num_workers=2)
            total = sum(float(batch[0].sum()) for batch in loader)
            print(f"total {total:.3f}")
        """,
    )
    result = run_memsight([str(script)], tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    report = json.loads(run_cli("report", "--json", str(result.profile_path), cwd=tmp_path).stdout)
    workers = [p for p in report["processes"] if p["role"] == "dataloader-worker"]
    assert len(workers) == 2, report["processes"]
    target = report["processes"][0]
    for worker in workers:
        assert worker["parent"] == target["pid"] and worker["command"] == target["command"]
        assert worker["exit_code"] == 0 and worker["started_s"] < worker["ended_s"]
    rules = {f["rule"] for f in report["findings"]}
    assert not rules & {"child-killed", "child-failed", "run-failed"}, rules
