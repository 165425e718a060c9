"""On a real CUDA device: the anatomy of one iteration, by module, against the allocator."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsight.profiler.diagnosis.anatomy import main_anatomy
from memsight.profiler.diagnosis.fit import projection
from tests.support import run_memsight, write_script

pytestmark = pytest.mark.slow

MiB = 1024**2


def test_a_cuda_training_iteration_is_measured_by_module_on_its_device(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "train.py",
        """
        import torch
        from torch import nn
        model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
        opt = torch.optim.Adam(model.parameters())
        for _ in range(4):
            x = torch.randn(512, 1024, device="cuda")
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        """,
    )
    traced = run_memsight(["train.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    profile = traced.profile()
    anatomy = main_anatomy(profile)
    assert anatomy is not None and anatomy.device == "cuda:0"
    modules = {m.path: m for m in anatomy.modules}
    assert modules["1"].activations == 512 * 4096 * 4  # ReLU's output, float32
    assert modules["0"].parameters == (1024 * 4096 + 4096) * 4
    assert modules["0"].optimizer_state == 2 * modules["0"].parameters
    assert anatomy.batch_size == 512
    assert anatomy.peak_bytes is not None and anatomy.peak_bytes >= anatomy.modules_bytes
    found = projection(anatomy)
    assert found is not None and found.projected_peak(512) == anatomy.peak_bytes
