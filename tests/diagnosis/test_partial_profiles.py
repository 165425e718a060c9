"""The rules never fail on a profile still being recorded.

In the app the rules run every 2 s on whatever has arrived: a run with no samples yet, steps
without their spans, an exception before its exit. Here a real training run's frames are fed
in one at a time, exactly as the live view receives them, and the rules run after every one.
"""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from memsight.profiler.diagnosis import diagnose, finding_to_json
from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.profile.live import LiveProfile
from memsight.profiler.recorder.session import Recording
from tests.support import write_script

# Records a real PyTorch training run, then diagnoses every prefix of it.
pytestmark = pytest.mark.slow

TRAIN_WITHOUT_ZERO_GRAD = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
for step in range(30):
    model(torch.randn(8, 32)).pow(2).mean().backward()
    optimizer.step()
    print("step", step, flush=True)
raise MemoryError("out of memory at the end, for the rules to see")
"""


def test_every_rule_runs_cleanly_on_every_prefix_of_a_live_run(tmp_path: Path) -> None:
    script = write_script(tmp_path, "train.py", TRAIN_WITHOUT_ZERO_GRAD)
    frames: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    spec = RunSpec(target=str(script), cwd=str(tmp_path), interval_ms=5)
    recording = Recording(
        spec, tmp_path / "run.memsight", stdio="capture", new_session=True, live=frames.put
    )
    recording.start()
    assert recording.wait().exit_code == 1

    live = LiveProfile()
    seen: set[str] = set()
    fed = 0
    while not frames.empty():
        live.put(frames.get())
        live.drain()
        fed += 1
        result = diagnose(live.profile.snapshot())
        assert not result.failed, (fed, result.failed)
        for finding in result.findings:
            finding_to_json(finding)  # every finding also serialises, fixes and all
            seen.add(finding.rule)
    assert fed > 20
    assert {"missing-zero-grad", "out-of-memory"} <= seen
