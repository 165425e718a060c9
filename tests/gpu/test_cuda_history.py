"""On a real CUDA device: `--cuda-history`, the block list at an OOM, `export --memory-viz`.

The same paths run against a fake allocator in tests/agent/test_cuda_history.py.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from memsight.profiler.diagnosis import diagnose
from tests.support import run_cli, run_memsight, write_script

pytestmark = pytest.mark.slow

MiB = 1 << 20

# Fragments the device as PyTorch's allocator really fragments: 64 MiB segments fill it and are
# freed into the cache, then a 40 MiB tensor splits each of them. The 24 MiB left in each
# segment is too small for the next 40 MiB request and cannot be given back (its segment is in
# use), so that request fails with most of the free memory inside the allocator's segments.
# (Freed whole segments would not do: before it raises, the allocator returns them to the
# device and retries, and the retry succeeds.)
FRAGMENT = """
    import time
    import torch
    from torch import nn

    torch.ones(1, device="cuda")
    time.sleep(0.3)  # the agent sees CUDA and turns history on
    nn.Linear(4, 4).cuda()(torch.ones(1, 4, device="cuda"))  # attaches the OOM observer
    MiB = 1 << 20


    def fill():
        kept = []
        try:
            while True:
                kept.append(torch.empty(64 * MiB, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            pass
        return kept


    del fill()[:]
    split = []
    while True:
        split.append(torch.empty(40 * MiB, dtype=torch.uint8, device="cuda"))
"""


def test_history_block_list_and_memory_viz_export_on_a_real_oom(tmp_path: Path) -> None:
    write_script(tmp_path, "fragment.py", FRAGMENT)
    result = run_memsight(["--cuda-history", "fragment.py"], tmp_path, timeout=300)
    assert result.returncode == 1, result.stderr
    profile = result.profile()
    (history,) = profile.events_of("cuda_history")
    assert history.get("started") is True, history.data
    blocks = list(profile.events_of("cuda_blocks"))
    assert blocks and blocks[-1].get("free", 0) >= 3 * 64 * MiB
    (finding,) = [f for f in diagnose(profile).findings if f.rule == "out-of-memory"]
    assert "free inside them" in finding.evidence.text
    assert finding.evidence.numbers["fragmented"] is True
    assert any(w.holder and Path(w.file).name == "fragment.py" for w in finding.where)

    out = tmp_path / "viz.pickle"
    assert result.profile_path is not None
    exported = run_cli("export", result.profile_path, "--memory-viz", out, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    with open(out, "rb") as f:
        snapshot = pickle.load(f)
    assert snapshot["segments"] and any(
        e["action"] == "oom" for trace in snapshot["device_traces"] for e in trace
    )
    report = json.loads(run_cli("report", "--json", result.profile_path, cwd=tmp_path).stdout)
    assert "oom" in [s["reason"] for s in report["cuda_snapshots"]]


def test_without_the_option_no_history_is_recorded(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "plain.py",
        """
        import torch
        x = torch.ones(1024, device="cuda")
        assert not torch._C._cuda_isHistoryEnabled()
        import time; time.sleep(0.3)
        assert not torch._C._cuda_isHistoryEnabled()
        """,
    )
    result = run_memsight(["plain.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    profile = result.profile()
    assert not list(profile.events_of("cuda_history", "cuda_snapshot", "attachment"))
