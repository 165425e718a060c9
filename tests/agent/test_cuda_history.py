"""The CUDA allocator's history, snapshots and block list, against fakes of PyTorch's surface.

Unit tests drive agent/snapshots.py directly; the end-to-end tests run a script under
`memsight run` whose (CPU) torch gets the fake allocator of fake_cuda_allocator.py, so the real
agent, recorder, profile file, diagnosis and `memsight export` all take part.
"""

from __future__ import annotations

import json
import pickle
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from memsight.profiler.agent.port import AgentPort
from memsight.profiler.agent.snapshots import CudaSnapshots, summarize_blocks
from memsight.profiler.diagnosis import diagnose
from tests.agent import fake_cuda_allocator
from tests.support import run_cli, run_memsight, write_script

MiB = 1 << 20


class Events:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def event(self, type_: str, t: int | None = None, **data: Any) -> None:
        self.events.append({"type": type_, **data})

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


def _torch_with(record: Any, enabled: bool | None = False, snapshot: Any = None) -> Any:
    c_module = SimpleNamespace()
    if enabled is not None:
        c_module._cuda_isHistoryEnabled = lambda: enabled
    memory = SimpleNamespace(_snapshot=snapshot or (lambda device=None: {"segments": []}))
    if record is not None:
        memory._record_memory_history = record
    return SimpleNamespace(
        cuda=SimpleNamespace(memory=memory, is_initialized=lambda: True, current_device=lambda: 0),
        _C=c_module,
    )


# -- history ---------------------------------------------------------------------------------


def test_history_is_turned_on_with_python_stacks_and_a_bounded_ring_buffer() -> None:
    allocator = fake_cuda_allocator.FakeAllocator()
    fake_cuda_allocator.calls.clear()
    agent = Events()
    history = CudaSnapshots(cast(AgentPort, agent), 5000, "/nonexistent")
    torch = _torch_with(allocator.record_memory_history, enabled=False)
    history.start_history(torch)
    history.start_history(torch)  # once only
    assert fake_cuda_allocator.calls == [
        (
            "_record_memory_history",
            ("all",),
            {"context": "all", "stacks": "python", "max_entries": 5000},
        )
    ]
    assert agent.of("cuda_history") == [
        {"type": "cuda_history", "started": True, "max_entries": 5000, "api": "current"}
    ]
    assert history.history == "memsight"


def test_torch_2_0s_boolean_signature_is_used_where_the_string_one_is_missing() -> None:
    seen: list[tuple[Any, ...]] = []

    # torch 2.0: _record_memory_history(enabled: bool, record_context=True,
    # trace_alloc_max_entries=1, trace_alloc_record_context=False, device=None,
    # record_context_cpp=False)
    def legacy(
        enabled: bool,
        record_context: bool = True,
        trace_alloc_max_entries: int = 1,
        trace_alloc_record_context: bool = False,
        device: Any = None,
        record_context_cpp: bool = False,
    ) -> None:
        seen.append((enabled, record_context, trace_alloc_max_entries, trace_alloc_record_context))

    agent = Events()
    CudaSnapshots(cast(AgentPort, agent), 100, None).start_history(
        _torch_with(legacy, enabled=None)
    )
    assert seen == [(True, True, 100, True)]
    assert agent.of("cuda_history")[0]["api"] == "legacy"


def test_a_script_that_records_history_itself_keeps_its_settings() -> None:
    allocator = fake_cuda_allocator.FakeAllocator()
    fake_cuda_allocator.calls.clear()
    agent = Events()
    history = CudaSnapshots(cast(AgentPort, agent), 5000, None)
    history.start_history(_torch_with(allocator.record_memory_history, enabled=True))
    assert fake_cuda_allocator.calls == []
    assert agent.of("cuda_history") == [
        {
            "type": "cuda_history",
            "started": False,
            "reason": "the script records history itself",
        }
    ]
    assert history.history == "script"


def test_without_the_option_history_is_never_touched() -> None:
    def record(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("called")

    agent = Events()
    CudaSnapshots(cast(AgentPort, agent), 0, "/tmp").start_history(_torch_with(record))
    assert agent.events == []


def test_a_torch_without_the_function_is_reported_not_raised() -> None:
    agent = Events()
    CudaSnapshots(cast(AgentPort, agent), 10, None).start_history(_torch_with(None))
    assert agent.of("cuda_history")[0]["started"] is False


# -- block list --------------------------------------------------------------------------------


def _block(size: int, state: str, frames: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "address": 0,
        "size": size,
        "requested_size": size - 512 if state != "inactive" else 0,
        "state": state,
        "frames": frames or [],
    }


def _segment(device: int, *blocks: dict[str, Any]) -> dict[str, Any]:
    total = sum(b["size"] for b in blocks)
    return {
        "device": device,
        "address": 0x7F00000000,
        "total_size": total,
        "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
        "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
        "requested_size": 0,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": list(blocks),
    }


def test_the_block_list_sums_up_one_devices_segments() -> None:
    user = {"filename": "/work/train.py", "line": 12, "name": "train"}
    torch_frame = {
        "filename": "/x/site-packages/torch/nn/modules/linear.py",
        "line": 125,
        "name": "forward",
    }
    cpp = {"filename": "/pytorch/c10/cuda/CUDACachingAllocator.cpp", "line": 900, "name": "malloc"}
    snapshot = {
        "segments": [
            _segment(
                0,
                _block(100 * MiB, "active_allocated", [cpp, torch_frame, user]),
                _block(30 * MiB, "inactive"),
                _block(20 * MiB, "active_pending_free"),
            ),
            _segment(0, _block(40 * MiB, "inactive"), _block(10 * MiB, "active_allocated")),
            _segment(1, _block(999 * MiB, "active_allocated")),
        ],
        "device_traces": [[], []],
    }
    out = summarize_blocks(snapshot, 0, limit=1)
    assert out["segments"] == 2
    assert out["reserved"] == 200 * MiB
    assert out["allocated"] == 110 * MiB
    assert (out["free"], out["free_blocks"], out["largest_free"]) == (70 * MiB, 2, 40 * MiB)
    assert out["pending_free"] == 20 * MiB
    assert out["with_frames"] == 1
    # Only the largest block is listed (limit 1), its Python frames outermost first.
    (largest,) = out["largest"]
    assert largest["size"] == 100 * MiB
    assert [f[:3] for f in largest["frames"]] == [
        ["/work/train.py", 12, "train"],
        ["/x/site-packages/torch/nn/modules/linear.py", 125, "forward"],
    ]
    json.dumps(out)  # an event: plain JSON


def test_snapshots_of_torch_before_2_1_keep_frames_in_the_blocks_history() -> None:
    block = {
        "size": 4 * MiB,
        "state": "active_allocated",
        "history": [
            {
                "addr": 0,
                "real_size": 4 * MiB,
                "frames": [{"filename": "a.py", "line": 3, "name": "f"}],
            }
        ],
    }
    out = summarize_blocks({"segments": [_segment(0, block)]}, None)
    assert out["largest"][0]["frames"][0][:3] == ["a.py", 3, "f"]


def test_a_malformed_snapshot_gives_zeros_not_an_error() -> None:
    assert summarize_blocks({"segments": [None, {"blocks": "x"}]}, 0)["segments"] == 1
    assert summarize_blocks(None, 0)["segments"] == 0


# -- end to end: memsight run -> profile -> report / export -------------------------------------

# A script that fragments the fake device's memory and runs out of it, as on a real device: four
# 210 MiB segments cached, each then split by a 110 MiB tensor (400 MiB free in four pieces that
# the allocator cannot give back), then a 300 MiB request on a 1 GiB device.
SCRIPT = """\
    import json
    import os
    import pickle
    import sys
    import time

    import torch
    from torch import nn

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "site-packages"))
    import fake_cuda_allocator as fake

    MiB = 1 << 20
    allocator = fake.install(total=1024 * MiB)
    allocator.alloc(2 * MiB)  # the script initialises CUDA
    if os.environ.get("SCRIPT_HISTORY"):
        torch.cuda.memory._record_memory_history(max_entries=7)
    deadline = time.monotonic() + 10
    while os.environ.get("WAIT_HISTORY") and not allocator.is_history_enabled():
        assert time.monotonic() < deadline, "history never turned on"
        time.sleep(0.01)
    time.sleep(0.2)  # the agent has seen CUDA (it looks every 50 ms)
    nn.Linear(4, 4)(torch.ones(1, 4))  # the OOM observer is attached at the first forward


    for address in [allocator.alloc(210 * MiB) for _ in range(4)]:
        allocator.free(address)


    def split_the_cache():
        return [allocator.alloc(110 * MiB) for _ in range(4)]


    kept = split_the_cache()
    try:
        allocator.alloc(300 * MiB)
    finally:
        with open("calls.json", "w") as f:
            json.dump([c[0] for c in fake.calls], f)
        with open("returned.pickle", "wb") as f:
            f.write(pickle.dumps(allocator.returned[0]) if allocator.returned else b"")
"""


def _setup(tmp_path: Path) -> Path:
    library = tmp_path / "lib" / "site-packages"  # a library's folder: not the user's code
    library.mkdir(parents=True)
    shutil.copy(Path(fake_cuda_allocator.__file__), library / "fake_cuda_allocator.py")
    return write_script(tmp_path, "fragment.py", SCRIPT)


@pytest.mark.slow
def test_history_snapshots_and_block_list_reach_the_profile_and_memory_viz(
    tmp_path: Path,
) -> None:
    script = _setup(tmp_path)
    result = run_memsight(
        ["--cuda-history=5000", str(script)], tmp_path, env=_env({"WAIT_HISTORY": "1"})
    )
    assert result.returncode == 1, result.stderr
    assert "OutOfMemoryError" in result.stderr
    assert json.loads((tmp_path / "calls.json").read_text())[0] == "_record_memory_history"
    profile = result.profile()
    assert not list(profile.events_of("agent_error", "warning")), profile.events
    (history,) = profile.events_of("cuda_history")
    assert history.data == {"started": True, "max_entries": 5000, "api": "current"}

    # The block list at the OOM, and the finding built on it.
    (blocks,) = profile.events_of("cuda_blocks")
    assert (blocks.get("free"), blocks.get("free_blocks")) == (400 * MiB, 4)
    assert (blocks.get("largest_free"), blocks.get("requested")) == (100 * MiB, 300 * MiB)
    (finding,) = [f for f in diagnose(profile).findings if f.rule == "out-of-memory"]
    assert "400.0 MiB free inside them in 4 blocks, the largest 100.0 MiB: fragmentation" in (
        finding.evidence.text
    )
    assert finding.evidence.numbers["fragmented"] is True
    assert finding.fixes[0] == "allocator-config"
    first = finding.where[0]
    (allocated_here,) = [w for w in finding.where if w.holder]
    assert (Path(first.file).name, first.code) == ("fragment.py", "allocator.alloc(300 * MiB)")
    assert Path(allocated_here.file).name == "fragment.py"
    assert allocated_here.code == "return [allocator.alloc(110 * MiB) for _ in range(4)]"
    assert allocated_here.bytes == 440 * MiB and "4 live blocks" in (allocated_here.holder or "")

    # Two snapshots stored (at the OOM and at exit); the default export is the OOM one, the
    # very bytes _dump_snapshot would have written of the dict the allocator returned.
    assert result.profile_path is not None
    listed = run_cli("export", result.profile_path, "--list", cwd=tmp_path)
    assert listed.stdout.splitlines()[0].startswith("snapshot 1, taken at an out-of-memory error")
    assert "taken at exit" in listed.stdout.splitlines()[1]
    out = tmp_path / "viz.pickle"
    exported = run_cli("export", result.profile_path, "--memory-viz", out, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "pytorch.org/memory_viz" in exported.stderr
    returned = (tmp_path / "returned.pickle").read_bytes()
    assert out.read_bytes() == returned
    with open(out, "rb") as f:
        loaded = pickle.load(f)
    assert loaded == pickle.loads(returned)
    assert loaded["device_traces"][0][-1]["action"] == "oom"
    assert {b["state"] for s in loaded["segments"] for b in s["blocks"]} == {
        "active_allocated",
        "inactive",
    }
    at_exit = run_cli(
        "export", result.profile_path, "--memory-viz", out, "--at", "exit", cwd=tmp_path
    )
    assert at_exit.returncode == 0, at_exit.stderr
    assert pickle.loads(out.read_bytes())["segments"]

    report = run_cli("report", "--json", result.profile_path, cwd=tmp_path)
    data = json.loads(report.stdout)
    assert [s["reason"] for s in data["cuda_snapshots"]] == ["oom", "exit"]


@pytest.mark.slow
def test_without_cuda_history_nothing_is_recorded_but_the_block_list_is_kept(
    tmp_path: Path,
) -> None:
    script = _setup(tmp_path)
    result = run_memsight([str(script)], tmp_path, env=_env())
    assert result.returncode == 1, result.stderr
    assert "_record_memory_history" not in json.loads((tmp_path / "calls.json").read_text())
    profile = result.profile()
    assert not list(profile.events_of("cuda_history", "cuda_snapshot", "attachment"))
    assert result.profile_path is not None
    with open(result.profile_path, "rb") as f:
        assert f.read(16)[8] == 1  # format version 1: nothing new in the file
    (blocks,) = profile.events_of("cuda_blocks")
    assert blocks.get("with_frames") == 0  # no history, no stacks
    (finding,) = [f for f in diagnose(profile).findings if f.rule == "out-of-memory"]
    assert "the largest 100.0 MiB: fragmentation" in finding.evidence.text
    assert not [w for w in finding.where if w.holder]  # no allocation stacks without history
    exported = run_cli(
        "export", result.profile_path, "--memory-viz", tmp_path / "x.pickle", cwd=tmp_path
    )
    assert exported.returncode == 1
    assert "holds no CUDA memory snapshot" in exported.stderr
    assert "--cuda-history" in exported.stderr
    assert not (tmp_path / "x.pickle").exists()


@pytest.mark.slow
def test_a_script_recording_history_itself_keeps_its_own_settings(tmp_path: Path) -> None:
    script = _setup(tmp_path)
    result = run_memsight(
        ["--cuda-history", str(script)], tmp_path, env=_env({"SCRIPT_HISTORY": "1"})
    )
    assert result.returncode == 1, result.stderr
    # The script's own call only: memsight saw history on and left it alone.
    calls = json.loads((tmp_path / "calls.json").read_text())
    assert calls.count("_record_memory_history") == 1
    profile = result.profile()
    (history,) = profile.events_of("cuda_history")
    assert history.data == {"started": False, "reason": "the script records history itself"}
    snapshots = list(profile.events_of("cuda_snapshot"))
    assert [s.get("history") for s in snapshots] == ["script", "script"]
    assert all(s.get("trace_entries") == 7 for s in snapshots)  # the script's ring buffer


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    from tests.support import child_env

    return child_env(extra)


def test_the_fake_keeps_pytorchs_signatures() -> None:
    """The fake's functions take what torch's own take (torch/cuda/memory.py)."""
    import inspect

    real = pytest.importorskip("torch.cuda.memory")
    fake = fake_cuda_allocator.FakeAllocator()
    ours = inspect.signature(fake.record_memory_history).parameters
    theirs = inspect.signature(real._record_memory_history).parameters
    assert list(ours)[: len(theirs)] == list(theirs)[: len(ours)]
    assert list(inspect.signature(fake.snapshot).parameters) == list(
        inspect.signature(real._snapshot).parameters
    )
    assert sys.maxsize == ours["max_entries"].default
