"""Device memory from NVML (the nvidia-ml-py package), read from the recorder's side.

NVML sees what PyTorch's allocator cannot: the CUDA context, NCCL buffers, other processes.
It starts only after the agent reports that the target initialised CUDA, and it is optional:
without a driver or the package, the run is recorded without these columns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from profiler.recorder.blocks import TableBuffer


def load_nvml() -> Any | None:
    """The initialised pynvml module, or None where NVML is unavailable."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


class NvmlSampler(threading.Thread):
    def __init__(
        self,
        nvml: Any,
        table: TableBuffer,
        pids: Callable[[], set[int]],
        interval_s: float = 0.1,
    ) -> None:
        super().__init__(name="memsight-nvml", daemon=True)
        self.nvml = nvml
        self.table = table
        self.pids = pids
        self.interval_s = interval_s
        self._halt = threading.Event()
        self.handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.sample()
            except Exception:
                return  # NVML went away (driver reset, say): stop quietly
            self._halt.wait(self.interval_s)

    def sample(self) -> None:
        t = time.monotonic_ns()
        pids = self.pids()
        for index, handle in enumerate(self.handles):
            info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            self.table.add(
                (t, index, int(info.used), int(info.total), self._process_used(handle, pids))
            )

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
