"""The recorder's NVML reads, against a fake of the few pynvml calls it makes."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from profiler import protocol
from profiler.recorder import nvml
from profiler.recorder.blocks import TableBuffer
from profiler.replay import ProfileBuilder

GiB = 1024**3


class FakeNvml:
    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.processes = [
            SimpleNamespace(pid=100, usedGpuMemory=3 * GiB),  # the target
            SimpleNamespace(pid=101, usedGpuMemory=GiB),  # one of its workers
            SimpleNamespace(pid=999, usedGpuMemory=20 * GiB),  # someone else's job
            SimpleNamespace(pid=102, usedGpuMemory=None),  # driver could not tell
        ]

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=(30 + handle) * GiB, total=80 * GiB)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return self.processes if handle == 0 else []


def test_device_memory_and_the_target_trees_own_share_are_recorded() -> None:
    table = TableBuffer(protocol.NVML_TABLE)
    sampler = nvml.NvmlSampler(FakeNvml(), table, pids=lambda: {100, 101, 102})
    sampler.sample()
    builder = ProfileBuilder()
    builder.feed(protocol.SCHEMA, protocol.NVML_TABLE.frame()[protocol.HEADER_SIZE :])
    frame = table.drain()
    builder.feed(frame[4], frame[protocol.HEADER_SIZE :])
    builder.flush()
    rows = builder.profile.tables["nvml"]
    assert list(rows["device"]) == [0, 1]
    assert list(rows["used"]) == [30 * GiB, 31 * GiB]
    assert list(rows["total"]) == [80 * GiB, 80 * GiB]
    assert list(rows["process_used"]) == [4 * GiB, 0]


def test_without_a_driver_nvml_is_simply_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    assert nvml.load_nvml() is None
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    assert nvml.load_nvml() is not None
