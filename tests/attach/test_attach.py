"""`memsight attach` on real running processes: a training loop recorded through its agent and
left running exactly as before, the outside-only mode, and the errors a user can meet."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsight.profiler.profile.storage import load_profile
from memsight.profiler.recorder.inject import gdb_call_problem
from tests.load import deadline
from tests.support import (
    Completed,
    child_env,
    memsight_command,
    one_line,
    run_cli,
    run_plain,
    wait_until,
    way_in,
    write_script,
)

pytestmark = pytest.mark.slow  # real processes, a debugger

# A training loop with a leak (outputs kept with their graphs), one line per step, that runs
# until a file says stop (or STEPS steps). At its end it says whether anything of memsight
# is left in it: hooks, wrappers, modules, the monitoring tool.
TRAIN = """\
import os, sys, time
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 64), torch.randn(128, 1)
kept = []
train_before = torch.nn.Module.train
limit = int(os.environ.get("STEPS", "0"))
print("ready", flush=True)
step = 0
while (step < limit) if limit else not os.path.exists("stop"):
    out = model(x)
    loss = ((out - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    kept.append(model(x))  # the leak: an output and its graph, every step
    print(step, f"{loss.item():.6f}", flush=True)
    step += 1
    time.sleep(0.005)
from torch.optim import optimizer
left = [
    len(optimizer._global_optimizer_pre_hooks) + len(optimizer._global_optimizer_post_hooks),
    torch.nn.Module.train is train_before,
    any(name.startswith("_memsight") for name in sys.modules),
]
monitoring = getattr(sys, "monitoring", None)
if monitoring is not None:
    left.append([monitoring.get_tool(i) for i in range(6)])
print("left", left, flush=True)
"""

needs_gdb = pytest.mark.skipif(
    not way_in(),
    reason="before Python 3.14 gdb is memsight's way into a running process: it is not "
    "installed, or cannot call functions in a process on this machine",
)


@pytest.fixture
def training(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    write_script(tmp_path, "train.py", TRAIN)
    process = subprocess.Popen(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    yield process
    (tmp_path / "stop").write_text("")
    process.kill()
    process.communicate()


def attach(folder: Path, *args: str, env: dict[str, str] | None = None) -> Completed:
    return run_cli("attach", *args, cwd=folder, env=env, timeout=180)


@needs_gdb
def test_a_running_training_is_recorded_through_its_agent_and_goes_on_unchanged(
    tmp_path: Path, training: subprocess.Popen[str]
) -> None:
    done = attach(tmp_path, str(training.pid), "--duration", "6", "-o", "att.memsight")
    assert done.returncode == 0, done.stderr
    assert "the agent is running" in done.stderr and "detached" in done.stderr
    assert training.poll() is None  # detached: it goes on
    profile = load_profile(tmp_path / "att.memsight")
    assert profile.info.attached and profile.info.detached
    assert profile.info.pid == training.pid
    assert any(e.type == "agent_connected" for e in profile.events)
    # Iterations, censuses and holders, as under `memsight run`.
    report = json.loads(run_cli("report", "att.memsight", "--json", cwd=tmp_path).stdout)
    assert report["run"]["attached"] is True and report["run"]["attached_at"]
    assert report["run"]["iterations"] > 50
    holders = {
        h["name"] for e in profile.events if e.type == "census" for h in e.data["census"]["holders"]
    }
    assert "kept" in holders
    text = run_cli("report", "att.memsight", cwd=tmp_path).stdout
    assert "what the process did before was not seen" in text
    # Let it finish: its output is the output of a run nobody attached to, step for step,
    # and nothing of memsight is left in it.
    (tmp_path / "stop").write_text("")
    out, err = training.communicate(timeout=deadline(60))
    assert training.returncode == 0, err
    steps = len(out.splitlines()) - 1
    reference = run_plain(["train.py"], tmp_path, env={**child_env(), "STEPS": str(steps)})
    assert "ready\n" + out == reference.stdout
    assert out.splitlines()[-1].startswith("left [0, True, False")


def test_no_inject_records_from_outside_without_a_debugger(
    tmp_path: Path, training: subprocess.Popen[str]
) -> None:
    done = attach(tmp_path, str(training.pid), "--no-inject", "--duration", "2", "-o", "o.memsight")
    assert done.returncode == 0, done.stderr
    profile = load_profile(tmp_path / "o.memsight")
    assert profile.sample_count > 20 and profile.info.attached
    assert not any(e.type == "agent_connected" for e in profile.events)
    assert training.poll() is None


def test_a_process_that_exits_while_attached_ends_the_recording(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "brief.py",
        "import time, os\nwhile not os.path.exists('stop'):\n    time.sleep(0.01)\n",
    )
    process = subprocess.Popen([sys.executable, "brief.py"], cwd=tmp_path)
    try:
        attaching = subprocess.Popen(
            memsight_command("attach", str(process.pid), "--no-inject", "-o", "b.memsight"),
            cwd=tmp_path,
            env=child_env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(lambda: (tmp_path / "b.memsight").exists(), 60, "the recording")
        (tmp_path / "stop").write_text("")
        _, err = attaching.communicate(timeout=deadline(60))
        assert attaching.returncode == 0, err
        assert "the process exited" in err
        assert load_profile(tmp_path / "b.memsight").info.ended_by.startswith("the process exited")
    finally:
        process.kill()
        process.wait()


def test_what_cannot_be_attached_to_is_one_line_and_status_2(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for args, reason in (
            ([str(gone.pid)], f"no process with pid {gone.pid}"),
            ([str(sleeper.pid)], "is not a Python process"),
            (["abc"], "is not a process id"),
            (["1", "--duration", "-3"], "--duration"),
        ):
            done = attach(tmp_path, *args)
            assert done.returncode == 2 and one_line(done.stderr), (args, done.stderr)
            assert reason in done.stderr, done.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not list(tmp_path.glob("*.memsight"))


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="3.14 has sys.remote_exec: a way in")
def test_without_a_way_in_it_records_from_outside_and_says_so(
    tmp_path: Path, training: subprocess.Popen[str]
) -> None:
    # No gdb on PATH (only the interpreter's folder), before Python 3.14.
    env = {**child_env(), "PATH": str(Path(sys.executable).parent)}
    done = attach(tmp_path, str(training.pid), "--duration", "2", "-o", "w.memsight", env=env)
    assert done.returncode == 0, done.stderr
    assert "gdb is not installed" in done.stderr and "recording from outside only" in done.stderr
    assert load_profile(tmp_path / "w.memsight").sample_count > 10
    assert training.poll() is None


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="3.14 gets in without gdb")
def test_ptrace_refused_is_one_line_saying_how_to_allow_it(
    tmp_path: Path, training: subprocess.Popen[str]
) -> None:
    # Root may always ptrace, so the kernel's refusal is played by a gdb that gets it.
    tools = tmp_path / "tools"
    tools.mkdir()
    gdb = tools / "gdb"
    gdb.write_text("#!/bin/sh\necho 'ptrace: Operation not permitted.' >&2\nexit 1\n")
    gdb.chmod(0o755)
    env = {**child_env(), "PATH": f"{tools}:{Path(sys.executable).parent}"}
    done = attach(tmp_path, str(training.pid), "-o", "p.memsight", env=env)
    assert done.returncode == 2
    error = [line for line in done.stderr.splitlines() if line.startswith("memsight: error:")]
    assert len(error) == 1 and "ptrace_scope" in error[0] and "SYS_PTRACE" in error[0]
    assert "--no-inject" in error[0]
    assert not (tmp_path / "p.memsight").exists()
    assert training.poll() is None


@needs_gdb
def test_a_process_memsight_records_already_gets_no_second_agent(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "loop.py",
        "import os, time\nprint(os.getpid(), flush=True)\n"
        "while not os.path.exists('stop'):\n    time.sleep(0.01)\n",
    )
    running = subprocess.Popen(
        memsight_command("run", "-q", "-o", "run.memsight", "loop.py"),
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert running.stdout is not None
        pid = int(running.stdout.readline())
        done = attach(tmp_path, str(pid), "--duration", "1", "-o", "second.memsight")
        assert done.returncode == 0, done.stderr
        assert "memsight records this process already" in done.stderr, done.stderr
        assert "recording from outside only" in done.stderr
    finally:
        (tmp_path / "stop").write_text("")
        running.communicate(timeout=deadline(60))
    assert running.returncode == 0


def _kernel_thread() -> int | None:
    """A pid whose /proc entry has no program (a kernel thread), if one is visible here."""
    import os

    for entry in sorted(Path("/proc").iterdir(), key=lambda p: p.name):
        if not entry.name.isdigit():
            continue
        try:
            os.readlink(entry / "exe")
        except FileNotFoundError:
            if (entry / "cmdline").read_bytes() == b"":
                return int(entry.name)
        except OSError:
            continue
    return None


def test_a_kernel_thread_is_not_taken_for_a_process_that_exited(tmp_path: Path) -> None:
    pid = _kernel_thread()
    if pid is None:
        pytest.skip("no kernel thread is visible in this container's /proc")
    done = attach(tmp_path, str(pid))
    assert done.returncode == 2 and one_line(done.stderr)
    assert "is not a Python process (a kernel thread" in done.stderr, done.stderr


def test_after_a_detach_the_childrens_going_on_is_no_warning(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "parent.py",
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print('ready', flush=True)\n"
        "while not os.path.exists('stop'):\n    time.sleep(0.01)\n"
        "child.kill(); child.wait()\n",
    )
    parent = subprocess.Popen(
        [sys.executable, "parent.py"], cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "ready\n"
        done = attach(
            tmp_path, str(parent.pid), "--no-inject", "--duration", "1", "-o", "c.memsight"
        )
        assert done.returncode == 0, done.stderr
        profile = load_profile(tmp_path / "c.memsight")
        assert len(profile.children) == 1  # the child was recorded, from outside
        assert not any("outlived" in warning for warning in profile.warnings), profile.warnings
    finally:
        (tmp_path / "stop").write_text("")
        parent.communicate(timeout=deadline(60))


@pytest.mark.skipif(
    sys.version_info >= (3, 14) or shutil.which("gdb") is None or way_in(),
    reason="runs where gdb is installed but cannot call functions in a process",
)
def test_where_gdb_cannot_call_functions_the_process_is_left_untouched(tmp_path: Path) -> None:
    # gdb 13.1 on Linux 6.18 fails to write the CPU's extended registers midway through a
    # call; a program it stopped in a system call then got OSError 514 from its sleep.
    write_script(
        tmp_path,
        "naps.py",
        "import os, time\nprint(os.getpid(), flush=True)\n"
        "for _ in range(8):\n    time.sleep(0.5)\nprint('slept fine', flush=True)\n",
    )
    napping = subprocess.Popen(
        [sys.executable, "naps.py"],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert napping.stdout is not None
    pid = int(napping.stdout.readline())

    done = attach(tmp_path, str(pid), "--duration", "1", "-o", "n.memsight")

    out, err = napping.communicate(timeout=60)
    assert done.returncode == 0, done.stderr
    assert "gdb cannot call functions" in done.stderr
    assert "recording from outside only" in done.stderr
    assert napping.returncode == 0 and out.strip() == "slept fine" and err == ""


def test_a_gdb_that_fails_a_call_is_found_on_a_process_of_memsights_own(tmp_path: Path) -> None:
    broken, working = tmp_path / "broken", tmp_path / "working"
    for folder in (broken, working):
        folder.mkdir()
    (broken / "gdb").write_text(
        '#!/bin/sh\necho "Couldn\'t write extended state status: Bad address." >&2\n'
        "echo '[Inferior 1 (process 1) detached]'\n"
    )
    # A gdb that calls getpid() in the process it was given, as a working one prints it.
    (working / "gdb").write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -p ] && echo "memsight-probe $2"; shift; done\n'
    )
    for folder in (broken, working):
        (folder / "gdb").chmod(0o755)

    assert (
        gdb_call_problem(str(broken / "gdb"))
        == "Couldn't write extended state status: Bad address."
    )
    assert gdb_call_problem(str(working / "gdb")) is None
