"""Two "nodes" of one torchrun job on this machine, each under its own `memsight run`, merged
into one job profile (`memsight merge`): the issue's multi-node test, on one host."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from memsight.profiler.profile.storage import load_profile
from tests.support import ROOT, child_env, memsight_command, run_cli

pytestmark = pytest.mark.slow

DDP = ROOT / "tests" / "clients" / "scripts" / "ddp_gloo.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_command(out: Path, port: int) -> list[str]:
    """One node of a 2-node torchrun job (1 rank each) under its own `memsight run`."""
    torchrun = ["-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1"]
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    return memsight_command("run", "-q", "-o", out, *torchrun, *rendezvous, "--rdzv-id", "job", DDP)


def test_two_nodes_recorded_apart_merge_into_one_job_in_lockstep(tmp_path: Path) -> None:
    port = free_port()
    nodes = [
        subprocess.Popen(
            node_command(tmp_path / f"node{n}.memsight", port),
            cwd=tmp_path,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in (0, 1)
    ]
    for node in nodes:
        _out, err = node.communicate(timeout=300)
        assert node.returncode == 0, err.decode()[-3000:]
    merged = run_cli(
        "merge", "node0.memsight", "node1.memsight", "-o", "job.memsight", cwd=tmp_path
    )
    assert merged.returncode == 0, merged.stderr
    job = load_profile(tmp_path / "job.memsight")
    # Both "nodes" read this machine's one monotonic clock, so the right shift is 0: what the
    # merge computed from the wall-clock starts is its alignment error, within the 1 ms it says
    # (two start times cut to the millisecond; 0.5 ms more for the recorder being preempted
    # between reading its two clocks)
    merge = next(job.events_of("merge"))
    offset_ns = merge.get("inputs")[1]["offset_ns"]
    assert abs(offset_ns) < 1.5e6, offset_ns
    assert "aligned to within about 1 ms" in merged.stdout
    ranks = sorted(
        (p for p in job.subprocesses.values() if p.process.role == "rank"),
        key=lambda p: p.process.rank or 0,
    )
    # One rank per node, each with all its steps, told apart by torchrun's group rank
    assert [r.process.rank for r in ranks] == [0, 1]
    assert sorted(r.process.group_rank for r in ranks) == [0, 1]  # type: ignore[type-var]
    assert all(r.iterations == 30 for r in ranks)
    # DDP keeps them in lockstep: on the merged clock their steps end together (each step's
    # all-reduce waits for both), far closer than the 50 ms a misaligned clock would give
    ends = [r.steps["end"] for r in ranks if r.steps is not None]
    assert len(ends) == 2
    assert float(np.median(np.abs(ends[0] - ends[1]))) < 0.05
    # Both nodes' launchers are processes of the job too
    launchers = [p for p in (job, *job.subprocesses.values()) if p.process.role == "other"]
    assert len(launchers) >= 2
