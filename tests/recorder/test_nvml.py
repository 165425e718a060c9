"""The recorder's NVML reads, against a fake of the few pynvml calls it makes."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from memsight.profiler import protocol
from memsight.profiler.profile.replay import ProfileBuilder
from memsight.profiler.recorder import nvml
from memsight.profiler.recorder.blocks import TableBuffer

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

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-aaaa-{handle}"

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        return SimpleNamespace(domain=0, bus=0x17 + handle, device=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=(30 + handle) * GiB, total=80 * GiB)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return self.processes if handle == 0 else []


def record(sampler: nvml.NvmlSampler) -> Any:
    table = TableBuffer(protocol.NVML_TABLE)
    assert sampler.open()
    sampler.sample(table)
    builder = ProfileBuilder()
    builder.feed(protocol.SCHEMA, protocol.NVML_TABLE.frame()[protocol.HEADER_SIZE :])
    frame = table.drain()
    builder.feed(frame[4], frame[protocol.HEADER_SIZE :])
    builder.flush()
    return builder.profile.tables["nvml"]


def test_device_memory_and_the_target_trees_own_share_are_recorded() -> None:
    devices = [{"index": 0, "uuid": "GPU-AAAA-0"}, {"index": 1, "uuid": "aaaa-1"}]
    rows = record(
        nvml.NvmlSampler(
            devices,
            lambda: TableBuffer(protocol.NVML_TABLE),
            lambda: {100, 101, 102},
            nvml=FakeNvml(),
        )
    )
    assert list(rows["device"]) == [0, 1]
    assert list(rows["used"]) == [30 * GiB, 31 * GiB]
    assert list(rows["total"]) == [80 * GiB, 80 * GiB]
    assert list(rows["process_used"]) == [4 * GiB, 0]


def test_rows_carry_the_cuda_index_even_where_nvml_numbers_devices_differently() -> None:
    # CUDA_VISIBLE_DEVICES=1: the target's cuda:0 is NVML's device 1 (bus 0x18).
    devices = [{"index": 0, "pci": [0, 0x18, 0]}]
    rows = record(
        nvml.NvmlSampler(
            devices, lambda: TableBuffer(protocol.NVML_TABLE), lambda: set(), nvml=FakeNvml()
        )
    )
    assert list(rows["device"]) == [0]
    assert list(rows["used"]) == [31 * GiB]


def test_a_device_nvml_cannot_identify_is_left_out() -> None:
    sampler = nvml.NvmlSampler(
        [{"index": 0, "uuid": "GPU-other"}],
        lambda: TableBuffer(protocol.NVML_TABLE),
        set,
        nvml=FakeNvml(),
    )
    assert not sampler.open()


def test_without_a_driver_nvml_is_simply_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    assert nvml.load_nvml() is None
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    assert nvml.load_nvml() is not None


def test_without_an_agent_the_devices_the_tree_uses_are_found_by_its_pids() -> None:
    # `memsight attach --no-inject`: no cuda_init names the devices; NVML says which ones
    # the process tree has a context on, in NVML's own numbering.
    fake = FakeNvml()
    assert nvml.devices_in_use(fake, {100, 101}) == [{"index": 0, "uuid": "GPU-aaaa-0"}]
    assert nvml.devices_in_use(fake, {555}) == []  # a CPU-only process: no GPU plot at all
    found = nvml.devices_in_use(fake, {100})
    rows = record(
        nvml.NvmlSampler(found, lambda: TableBuffer(protocol.NVML_TABLE), lambda: {100}, nvml=fake)
    )
    assert list(rows["device"]) == [0]
    assert list(rows["process_used"]) == [3 * GiB]
