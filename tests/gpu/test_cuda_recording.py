"""On a real CUDA device: allocator tracking, peaks between samples, phases, OOM capture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support import run_memsight, write_script

# Real PyTorch scripts on a CUDA device under `memsight run`.
pytestmark = pytest.mark.slow

GiB = 1024**3


def test_allocated_and_reserved_follow_the_script_and_the_device_is_described(
    tmp_path: Path,
) -> None:
    write_script(
        tmp_path,
        "alloc.py",
        """
        import time, torch
        x = torch.ones(256, 1024, 1024, device="cuda")      # 1 GiB
        torch.cuda.synchronize(); time.sleep(0.5)
        del x
        torch.cuda.synchronize(); time.sleep(0.5)
        torch.cuda.empty_cache(); time.sleep(0.3)
        """,
    )
    traced = run_memsight(["alloc.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    profile = traced.profile()
    gpu = profile.gpu
    assert gpu is not None and len(gpu) > 50
    assert int(gpu["allocated"].max()) >= GiB
    assert np.all(gpu["reserved"] >= gpu["allocated"])
    assert int(gpu["allocated"][-1]) < GiB // 4  # freed
    assert int(gpu["reserved"][-1]) < GiB // 4  # released by empty_cache
    (device, *_) = profile.info.devices
    assert device.total_bytes > 4 * GiB and device.name
    nvml = profile.table("nvml")
    assert nvml is not None and len(nvml) > 0
    assert int(nvml["process_used"].max()) >= GiB


def test_a_spike_between_two_samples_keeps_its_height(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "spike.py",
        """
        import time, torch
        torch.zeros(1, device="cuda"); time.sleep(0.7)
        for _ in range(5):
            y = torch.empty(512, 1024, 1024, device="cuda")    # 2 GiB, held ~2 ms
            torch.cuda._sleep(2_000_000) if hasattr(torch.cuda, "_sleep") else None
            del y
            time.sleep(0.3)
        """,
    )
    traced = run_memsight(["--interval-ms", "500", "spike.py"], tmp_path)
    gpu = traced.profile().gpu
    assert gpu is not None
    assert int(gpu["allocated_peak"].max()) >= 2 * GiB


def test_steps_carry_cuda_memory_and_the_breakdown(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "train.py",
        """
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
        opt = torch.optim.Adam(model.parameters())
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(256, 1024, device="cuda")).square().mean().backward()
            opt.step()
        """,
    )
    traced = run_memsight(["train.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    profile = traced.profile()
    steps = profile.steps
    assert steps is not None and len(steps) == 5
    params = (1024 * 4096 + 4096 + 4096 * 1024 + 1024) * 4
    assert (int(steps["params_gpu"][0]), int(steps["params_cpu"][0])) == (params, 0)
    assert int(steps["state_gpu"][0]) == 2 * params
    assert int(steps["device"][0]) == 0
    assert int(steps["allocated"][0]) >= 4 * params
    spans = profile.spans
    assert spans is not None and (spans["kind"] == 1).sum() == 5


def test_a_cuda_oom_is_captured_with_its_numbers_phase_and_observer_event(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "oom.py",
        """
        import torch
        model = torch.nn.Linear(8, 8).cuda()
        opt = torch.optim.SGD(model.parameters(), 0.1)
        opt.zero_grad(); model(torch.ones(1, 8, device="cuda")).sum().backward(); opt.step()
        class Huge(torch.nn.Module):
            def forward(self, x):
                return torch.empty(1 << 44, dtype=torch.uint8, device="cuda")  # 16 TiB
        try:
            Huge()(torch.ones(1))
        except torch.OutOfMemoryError:
            print("recovered")
        Huge()(torch.ones(1))
        """,
    )
    traced = run_memsight(["oom.py"], tmp_path)
    assert traced.returncode == 1
    assert traced.stdout == "recovered\n"
    assert "OutOfMemoryError" in traced.stderr
    profile = traced.profile()
    exceptions = list(profile.events_of("exception"))
    caught = exceptions[0]
    assert caught.get("oom") == "gpu" and caught.get("uncaught") is False
    assert caught.get("numbers")["requested"] == 1 << 44
    assert caught.get("phase") == "forward" and caught.get("iteration") == 1
    assert "cuda" in caught.get("memory")
    assert exceptions[-1].get("uncaught") is True
    observed = list(profile.events_of("oom_observed"))
    assert observed and observed[0].get("requested") >= 1 << 44
