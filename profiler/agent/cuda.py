"""Read torch.cuda's caching-allocator statistics without disturbing the script.

Only called once torch.cuda.is_initialized() is true, so nothing here creates a CUDA context.
Peak counters are read, never reset: the script's own max_memory_allocated() stays intact.
Each row's *_peak column is the highest value known to have occurred since the previous row:
the allocator's peak when it rose (or was reset by the script) since then, otherwise the
larger of the two surrounding readings.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ..protocol import GPU_TABLE

_FIELDS = (
    ("allocated", "allocated_bytes"),
    ("reserved", "reserved_bytes"),
    ("active", "active_bytes"),
    ("inactive_split", "inactive_split_bytes"),
)


class CudaSampler:
    def __init__(self, torch: Any) -> None:
        self.cuda = torch.cuda
        # The nested form skips the Python-side flattening of memory_stats(): ~10x cheaper.
        self._nested = getattr(getattr(torch, "_C", None), "_cuda_memoryStats", None)
        self.device_count = int(self.cuda.device_count())
        self._active: List[int] = []  # devices the script has allocated on
        self._last: Dict[int, Tuple[int, int, int, int]] = {}  # alloc, alloc peak, res, res peak

    def describe_devices(self) -> List[Dict[str, Any]]:
        devices = []
        for index in range(self.device_count):
            props = self.cuda.get_device_properties(index)
            device: Dict[str, Any] = {
                "index": index,
                "name": str(getattr(props, "name", "")),
                "total_bytes": int(getattr(props, "total_memory", 0)),
            }
            # Identities that let the recorder find the same device in NVML's numbering.
            uuid = getattr(props, "uuid", None)
            if uuid is not None:
                device["uuid"] = str(uuid)
            pci = [getattr(props, "pci_" + k + "_id", None) for k in ("domain", "bus", "device")]
            if all(isinstance(v, int) for v in pci):
                device["pci"] = pci
            devices.append(device)
        return devices

    def read(self, device: int) -> Dict[str, int]:
        """Current and peak values of one device's allocator counters."""
        out: Dict[str, int] = {}
        if self._nested is not None:
            stats = self._nested(device)
            for name, key in _FIELDS:
                entry = stats.get(key, {}).get("all", {})
                out[name] = int(entry.get("current", 0))
                out[name + "_peak"] = int(entry.get("peak", 0))
            out["alloc_retries"] = int(stats.get("num_alloc_retries", 0))
            out["ooms"] = int(stats.get("num_ooms", 0))
        else:
            flat = self.cuda.memory_stats(device)
            for name, key in _FIELDS:
                out[name] = int(flat.get(key + ".all.current", 0))
                out[name + "_peak"] = int(flat.get(key + ".all.peak", 0))
            out["alloc_retries"] = int(flat.get("num_alloc_retries", 0))
            out["ooms"] = int(flat.get("num_ooms", 0))
        return out

    def sample(self, t_ns: int) -> bytes:
        rows = []
        for device in range(self.device_count):
            stats = self.read(device)
            if device not in self._active:
                if stats["reserved"] == 0 and stats["reserved_peak"] == 0:
                    continue
                self._active.append(device)
            alloc_peak = self._interval_peak(device, stats, 0)
            res_peak = self._interval_peak(device, stats, 2)
            self._last[device] = (
                stats["allocated"],
                stats["allocated_peak"],
                stats["reserved"],
                stats["reserved_peak"],
            )
            rows.append(
                GPU_TABLE.row.pack(
                    t_ns,
                    device,
                    stats["allocated"],
                    alloc_peak,
                    stats["reserved"],
                    res_peak,
                    stats["active"],
                    stats["inactive_split"],
                    stats["alloc_retries"],
                    stats["ooms"],
                )
            )
        return b"".join(rows)

    def _interval_peak(self, device: int, stats: Dict[str, int], slot: int) -> int:
        name = "allocated" if slot == 0 else "reserved"
        current, peak = stats[name], stats[name + "_peak"]
        last = self._last.get(device)
        if last is None:
            return max(current, peak)
        last_current, last_peak = last[slot], last[slot + 1]
        if peak != last_peak:
            return max(peak, current)
        return max(last_current, current)
