"""No process the target started outlives the run (issue 14, item 2).

A real script double-forks daemons (which leave its tree at once) and starts `sleep &`
through a shell; each writes its pid to a file. After the run ends, by itself or by Ctrl+C,
every one of them must be gone.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memsight.profiler.launch.spec import RunSpec, spec_to_json
from tests.processes import is_running, kill_quietly, killpg_quietly, process_state, wait_gone
from tests.support import ROOT, memsight_command, wait_until, write_script

pytestmark = pytest.mark.slow

DAEMONS = 3

# Daemons ignore SIGINT and SIGHUP, as real ones do; the shell's `sleep &` gets the pid of the
# background job from `$!`.
FORK_DAEMONS = f"""\
import os, signal, sys, time

folder = sys.argv[1]
for i in range({DAEMONS}):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            with open(os.path.join(folder, f"daemon{{i}}"), "w") as f:
                f.write(str(os.getpid()))
            time.sleep(62)
        os._exit(0)
os.system("sleep 62 & echo $! > " + os.path.join(folder, "sleep.tmp")
          + " && mv " + os.path.join(folder, "sleep.tmp") + " " + os.path.join(folder, "sleep"))
names = [f"daemon{{i}}" for i in range({DAEMONS})]
while not all(os.path.exists(os.path.join(folder, n)) for n in names):
    time.sleep(0.01)  # each daemon has written its pid before the script ends
print("ready", flush=True)
if sys.argv[2] == "wait":
    time.sleep(60)
"""


def pids_written(folder: Path) -> list[int]:
    names = [f"daemon{i}" for i in range(DAEMONS)] + ["sleep"]
    files = [folder / name for name in names]
    wait_until(lambda: all(f.exists() and f.read_text() for f in files), 30, "the daemons")
    return [int(f.read_text()) for f in files]


@pytest.mark.parametrize("how", ["exit", "ctrl-c"])
def test_no_daemon_or_background_job_survives_the_run(tmp_path: Path, how: str) -> None:
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    script = write_script(tmp_path, "daemons.py", FORK_DAEMONS)
    proc = subprocess.Popen(
        memsight_command(
            "run", "-q", "-o", tmp_path / "p.memsight", script, pids_dir,
            "wait" if how == "ctrl-c" else "exit",
        ),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    pids: list[int] = []
    try:
        pids = pids_written(pids_dir)
        if how == "ctrl-c":
            assert all(is_running(pid) for pid in pids)  # the script waits: they all run
            for _ in range(3):
                proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        wait_gone(pids, timeout=5)
    finally:
        proc.kill()
        proc.wait()
        for pid in pids:
            kill_quietly(pid)


def test_the_apps_stop_leaves_no_daemon_or_background_job(tmp_path: Path) -> None:
    # The app's recording process, told "stop" on its control pipe as the Stop button does.
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    script = write_script(tmp_path, "daemons.py", FORK_DAEMONS)
    spec = RunSpec(target=str(script), cwd=str(tmp_path), args=(str(pids_dir), "wait"))
    pids: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-m", "memsight.profiler.recorder.host"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as host:
        assert host.stdin is not None and host.stdout is not None
        host.stdin.write(spec_to_json(spec, tmp_path / "p.memsight").encode() + b"\n")
        host.stdin.flush()
        try:
            pids = pids_written(pids_dir)
            host.stdin.write(b"stop\n")
            host.stdin.flush()
            host.stdout.read()
            assert host.wait(timeout=30) == 0
            wait_gone(pids, timeout=5)
        finally:
            host.kill()
            for pid in pids:
                kill_quietly(pid)


def test_orphans_that_die_during_the_run_are_reaped_not_left_as_zombies(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "short_daemon.py",
        """\
        import os, sys, time
        if os.fork() == 0:
            if os.fork() == 0:  # the orphan: adopted by memsight, then it exits
                with open(sys.argv[1], "w") as f:
                    f.write(str(os.getpid()))
                os._exit(0)
            os._exit(0)
        time.sleep(60)
        """,
    )
    pid_file = tmp_path / "orphan"
    proc = subprocess.Popen(
        memsight_command("run", "-q", "-o", tmp_path / "p.memsight", script, pid_file),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text(), 30, "the orphan")
        orphan = int(pid_file.read_text())
        wait_until(lambda: process_state(orphan) is None, 10, "the orphan to be reaped")
    finally:
        killpg_quietly(proc.pid)
        proc.wait(timeout=10)
