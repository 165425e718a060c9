"""Device memory from NVML (the nvidia-ml-py package), read from the recorder's side.

NVML sees what PyTorch's allocator cannot: the CUDA context, NCCL buffers, other processes.
It starts only after the agent reports that the target initialised CUDA, and it is optional:
without a driver or the package, the run is recorded without these columns.

NVML numbers devices in its own order, which differs from CUDA's under CUDA_DEVICE_ORDER or
CUDA_VISIBLE_DEVICES, so each CUDA device the agent reported is matched to its NVML handle by
UUID, then by PCI address, and rows carry the CUDA index.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from memsight.profiler.recorder.blocks import TableBuffer


def load_nvml() -> Any | None:
    """The initialised pynvml module, or None where NVML is unavailable."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _uuid_key(value: Any) -> str:
    return _text(value).lower().removeprefix("gpu-")


def match_devices(nvml: Any, cuda_devices: list[dict[str, Any]]) -> list[tuple[int, Any]]:
    """(CUDA index, NVML handle) for each CUDA device that NVML can see."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    by_uuid: dict[str, Any] = {}
    by_pci: dict[tuple[int, int, int], Any] = {}
    for handle in handles:
        with contextlib.suppress(Exception):
            by_uuid[_uuid_key(nvml.nvmlDeviceGetUUID(handle))] = handle
        with contextlib.suppress(Exception):
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            by_pci[(int(pci.domain), int(pci.bus), int(pci.device))] = handle
    matched = []
    for device in cuda_devices:
        index = device.get("index")
        if not isinstance(index, int):
            continue
        handle = by_uuid.get(_uuid_key(device.get("uuid") or "-"))
        pci = device.get("pci")
        if handle is None and isinstance(pci, list) and len(pci) == 3:
            handle = by_pci.get((pci[0], pci[1], pci[2]))
        if handle is None and not by_uuid and not by_pci and index < len(handles):
            handle = handles[index]  # an NVML without identities: assume the same order
        if handle is not None:
            matched.append((index, handle))
    return matched


def devices_in_use(nvml: Any, pids: set[int]) -> list[dict[str, Any]]:
    """The devices on which one of `pids` has a CUDA context now, as the agent would report
    them ({"index", "uuid"}) but in NVML's order: for a process recorded without its agent
    (`memsight attach --no-inject`), whose CUDA numbering is not known."""
    devices = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        try:
            running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception:
            continue
        if any(proc.pid in pids for proc in running):
            device: dict[str, Any] = {"index": index}
            with contextlib.suppress(Exception):
                device["uuid"] = _text(nvml.nvmlDeviceGetUUID(handle))
            devices.append(device)
    return devices


class NvmlSampler(threading.Thread):
    """Samples device memory every `interval_s` once NVML is up and devices are matched."""

    def __init__(
        self,
        cuda_devices: list[dict[str, Any]],
        table: Callable[[], TableBuffer],
        pids: Callable[[], set[int]],
        interval_s: float = 0.1,
        nvml: Any | None = None,
    ) -> None:
        super().__init__(name="memsight-nvml", daemon=True)
        self.cuda_devices = cuda_devices
        self.table_factory = table
        self.pids = pids
        self.interval_s = interval_s
        self.nvml: Any = nvml
        self.devices: list[tuple[int, Any]] = []
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def open(self) -> bool:
        """Initialise NVML (slow: it loads the driver library) and match devices."""
        if self.nvml is None:
            self.nvml = load_nvml()
        if self.nvml is None:
            return False
        try:
            self.devices = match_devices(self.nvml, self.cuda_devices)
        except Exception:
            return False
        return bool(self.devices)

    def run(self) -> None:
        if not self.open():
            return
        table = self.table_factory()
        while not self._halt.is_set():
            try:
                self.sample(table)
            except Exception:
                return  # NVML went away (driver reset, say): stop quietly
            self._halt.wait(self.interval_s)

    def sample(self, table: TableBuffer) -> None:
        t = time.monotonic_ns()
        pids = self.pids()
        for index, handle in self.devices:
            info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            used = self._process_used(handle, pids)
            table.add((t, index, int(info.used), int(info.total), used))

    def _process_used(self, handle: Any, pids: set[int]) -> int:
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception:
            return 0
        total = 0
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            if proc.pid in pids and isinstance(used, int):
                total += used
        return total
