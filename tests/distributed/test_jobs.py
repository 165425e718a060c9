"""Real multi-process jobs under `memsight run`: torchrun's ranks, mp.spawn's processes and any
Python child get the agent and are recorded, each on its own, in one profile.

Every job here runs DDP with the gloo backend on CPU, as the issue asks; the same script is
run under plain python where the comparison matters.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from memsight.profiler import protocol
from memsight.profiler.diagnosis import diagnose
from memsight.profiler.profile.header import FILE_HEADER
from memsight.profiler.profile.storage import load_profile
from tests.support import (
    PYTHON,
    ROOT,
    child_env,
    memsight_command,
    run_memsight,
    run_plain,
    wait_until,
    write_script,
)

pytestmark = pytest.mark.slow

DDP = ROOT / "tests" / "clients" / "scripts" / "ddp_gloo.py"
MiB = 1024 * 1024

SPAWN = """
import os, sys, tempfile
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def work(rank, world, store_file):
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank,
                            world_size=world)
    model = nn.parallel.DistributedDataParallel(nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(12):
        loss = model(torch.randn(16, 64)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.barrier()
    # Then rank 1 alone fine-tunes a head: each rank's iterations are counted on its own.
    head = nn.Linear(64, 1)
    local = torch.optim.SGD(head.parameters(), lr=0.01)
    for step in range(4 * rank):
        loss = head(torch.randn(16, 64)).pow(2).mean()
        local.zero_grad()
        loss.backward()
        local.step()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # gloo's threads can abort a normal interpreter exit (tests/clients/scripts)


if __name__ == "__main__":
    store = os.path.join(tempfile.mkdtemp(), "store")
    mp.spawn(work, args=(2, store), nprocs=2)
    print("spawned job done")
"""

OOM_ON_RANK_1 = """
import os, sys
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Linear(128, 128))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(20):
    loss = model(torch.randn(32, 128)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 1 and step == 10:
        cache = torch.empty(1 << 47)  # 512 TiB: the CPU allocator refuses at once
sys.stdout.flush()
os._exit(0)
"""

RANK_0_GATHERS = """
import os, sys
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Linear(128, 128))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
gathered = []
for step in range(40):
    loss = model(torch.randn(32, 128)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0 and step >= 10:  # rank 0 keeps what it collects: 20 MiB a step from step 10
        gathered.append(torch.ones(5 * 1024 * 1024))
dist.barrier()
sys.stdout.flush()
os._exit(0)
"""

PARENT = """
import json, os, subprocess, sys
child = subprocess.run([sys.executable, "child.py"], capture_output=True, text=True, check=True)
print(child.stdout, end="")
print(json.dumps({k: v for k, v in os.environ.items() if "MEMSIGHT" in k or k == "PYTHONPATH"}))
"""

CHILD = """
import json, os
block = bytearray(120 * 1024 * 1024)  # touched: 120 MiB of RAM the child holds
for i in range(0, len(block), 4096):
    block[i] = 1
print(json.dumps({k: v for k, v in os.environ.items() if "MEMSIGHT" in k or k == "PYTHONPATH"}))
"""


def test_torchrun_ranks_are_recorded_each_with_its_own_iterations(tmp_path: Path) -> None:
    traced = run_memsight(
        ["-m", "torch.distributed.run", "--nproc_per_node", "2", str(DDP)], tmp_path, timeout=300
    )
    assert traced.returncode == 0, traced.stderr[-3000:]
    profile = traced.profile()
    launcher = profile.process
    ranks = sorted(profile.subprocesses.values(), key=lambda p: p.process.rank or 0)
    assert [r.process.rank for r in ranks] == [0, 1]
    # torchrun's environment names each rank; the launcher is none
    assert launcher.rank is None and launcher.role == "other"
    for rank in ranks:
        info = rank.process
        assert (info.local_rank, info.world_size, info.group_rank) == (info.rank, 2, 0)
        assert info.parent == launcher.pid and info.role == "rank"
        assert rank.iterations == 30  # every optimizer step of the script, none lost at exit
        assert rank.ram is not None and rank.ram["rss"].max() > 100 * MiB  # torch is loaded
        assert info.started < rank.ram.t[-1] <= (info.ended or 0) + 0.1
        assert info.exit_code == 0
    # The job is clean: no process gets a warning, the ranks' start-up included
    serious = [f for f in diagnose(profile).findings if f.severity != "info"]
    assert serious == [], [f.title for f in serious]
    assert traced.profile_path is not None
    header = FILE_HEADER.unpack_from(traced.profile_path.read_bytes())
    assert header[1] == 3


def test_memsight_run_torchrun_runs_the_launcher_on_path_as_the_shell_would(
    tmp_path: Path,
) -> None:
    bin_dir = str(Path(PYTHON).parent)
    env = child_env({"PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")})
    traced = run_memsight(
        ["torchrun", "--nproc_per_node", "2", str(DDP)], tmp_path, env=env, timeout=300
    )
    assert traced.returncode == 0, traced.stderr[-3000:]
    profile = traced.profile()
    assert profile.info.script == os.path.join(bin_dir, "torchrun")
    assert sorted((p.process.rank, p.iterations) for p in profile.subprocesses.values()) == [
        (0, 30),
        (1, 30),
    ]


def test_an_out_of_memory_error_on_one_rank_is_reported_for_that_rank(tmp_path: Path) -> None:
    write_script(tmp_path, "ddp_oom.py", OOM_ON_RANK_1)
    traced = run_memsight(
        ["-m", "torch.distributed.run", "--nproc_per_node", "2", "ddp_oom.py"],
        tmp_path,
        timeout=300,
    )
    assert traced.returncode == 1  # torchrun fails the job, as under plain python
    findings = diagnose(traced.profile()).findings
    (oom,) = [f for f in findings if f.rule == "out-of-memory"]
    assert oom.process is not None and oom.process.rank == 1
    assert "11 optimizer steps" in oom.title  # rank 1's own steps, the launcher has none
    assert "ddp_oom.py:17" in oom.evidence.text  # the line of the rank's code


def test_rank_0_keeping_what_it_gathers_is_a_rank_imbalance_named_with_its_step(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "gather.py", RANK_0_GATHERS)
    traced = run_memsight(
        ["-m", "torch.distributed.run", "--nproc_per_node", "2", "gather.py"],
        tmp_path,
        timeout=300,
    )
    assert traced.returncode == 0, traced.stderr[-3000:]
    findings = diagnose(traced.profile()).findings
    (imbalance,) = [f for f in findings if f.rule == "rank-imbalance"]
    assert imbalance.severity == "warning"
    assert imbalance.process is not None and imbalance.process.rank == 0
    numbers = imbalance.evidence.numbers
    assert numbers["peak_bytes"] - numbers["others_median_bytes"] >= 500 * MiB  # type: ignore[operator]
    # It pulls away once it starts keeping tensors, at step 10 or a little after
    assert "iteration 1" in imbalance.evidence.text, imbalance.evidence.text


def test_mp_spawn_processes_are_named_by_the_rank_init_process_group_gave_them(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "spawn_job.py", SPAWN)
    traced = run_memsight(["spawn_job.py"], tmp_path, timeout=300)
    plain = run_plain(["spawn_job.py"], tmp_path, timeout=300)
    assert traced.returncode == plain.returncode == 0, traced.stderr[-3000:]
    assert traced.stdout == plain.stdout == "spawned job done\n"
    profile = traced.profile()
    ranks = {p.process.rank: p for p in profile.subprocesses.values() if p.process.role == "rank"}
    assert set(ranks) == {0, 1}  # from dist_init: mp.spawn sets no RANK
    # multiprocessing's resource tracker is a Python child too: recorded, named by its pid
    others = [p for p in profile.subprocesses.values() if p.process.role == "other"]
    assert all(p.iterations == 0 for p in others)
    assert ranks[0].iterations == 12 and ranks[1].iterations == 16
    assert all(r.process.world_size == 2 for r in ranks.values())
    assert profile.iterations == 0  # the parent only waits


def test_a_python_child_is_recorded_and_sees_the_environment_plain_python_gives(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "parent.py", PARENT)
    write_script(tmp_path, "child.py", CHILD)
    traced = run_memsight(["parent.py"], tmp_path)
    plain = run_plain(["parent.py"], tmp_path)
    assert traced.returncode == plain.returncode == 0, traced.stderr
    # The parent's and the child's environments are exactly what python gives them
    assert traced.stdout == plain.stdout
    profile = traced.profile()
    (child,) = profile.subprocesses.values()
    assert child.process.role == "other" and child.process.parent == profile.process.pid
    assert child.process.cmdline[-1] == "child.py"
    assert child.ram is not None and child.ram["rss_peak"].max() >= 120 * MiB
    # subprocess.run collects its exit status at once: whether memsight saw it is luck
    assert child.process.ended is not None and child.process.exit_code in (0, None)
    # Its memory is its own: the parent's own RSS never held it
    assert profile.ram is not None and profile.ram["rss"].max() < 100 * MiB


def test_a_process_outside_the_targets_tree_is_refused(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "wait.py",
        "import os, time\nopen('pid', 'w').write(str(os.getpid()))\n"
        "while not os.path.exists('go'):\n    time.sleep(0.02)\n",
    )
    out = tmp_path / "run.memsight"
    proc = subprocess.Popen(
        memsight_command("run", "-q", "-o", out, "wait.py"),
        cwd=tmp_path,
        env=child_env(),
        stdin=subprocess.DEVNULL,
    )
    try:
        pid = int(
            wait_until(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(), 30)
        )
        # The agent's variable is still in the initial environment /proc shows to the same user
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        raw = next(e for e in environ if e.startswith(protocol.AGENT_ENV.encode() + b"="))
        config = json.loads(raw.partition(b"=")[2])
        with socket.create_connection((config["host"], config["port"]), timeout=10) as sock:
            sock.sendall(protocol.hello_frame(config["token"], os.getpid()))
            sock.settimeout(10)
            assert sock.recv(1) == b""  # closed on us
    finally:
        (tmp_path / "go").touch()
        proc.wait(timeout=60)
    profile = load_profile(out)
    rejected = [e for e in profile.events if e.type == "connection_rejected"]
    assert rejected and "not in the target's process tree" in rejected[0].get("reason")
    assert not profile.subprocesses
