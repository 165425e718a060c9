"""The agent's CUDA branch, against a fake of the small torch.cuda surface it reads."""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from memsight.profiler import protocol
from memsight.profiler.agent.client import Agent
from memsight.profiler.agent.cuda import CudaSampler
from memsight.profiler.recorder.server import AgentServer

GiB = 1024**3


class FakeCuda:
    """torch.cuda as far as the agent uses it, with allocator counters a test can move."""

    def __init__(self, devices: int = 1, initialized: bool = True, nested: bool = True) -> None:
        self.initialized = initialized
        self.calls: list[str] = []
        # Counters by name, as torch.cuda.memory_stats nests them (an int, or {"all": {...}}).
        self.stats: list[dict[str, Any]] = [
            {
                "allocated_bytes": {"all": {"current": 0, "peak": 0}},
                "reserved_bytes": {"all": {"current": 0, "peak": 0}},
                "active_bytes": {"all": {"current": 0, "peak": 0}},
                "inactive_split_bytes": {"all": {"current": 0, "peak": 0}},
                "num_alloc_retries": 0,
                "num_ooms": 0,
            }
            for _ in range(devices)
        ]
        self.nested = nested

    def set(self, device: int = 0, **values: int) -> None:
        s = self.stats[device]
        for name, value in values.items():
            if name in ("num_alloc_retries", "num_ooms"):
                s[name] = value
                continue
            key, _, part = name.rpartition("_")
            s[key + "_bytes"]["all"][part] = value

    def is_initialized(self) -> bool:
        self.calls.append("is_initialized")
        return self.initialized

    def device_count(self) -> int:
        self.calls.append("device_count")
        return len(self.stats)

    def get_device_properties(self, i: int) -> Any:
        return SimpleNamespace(name=f"Fake GPU {i}", total_memory=80 * GiB)

    def memory_stats(self, device: int) -> dict[str, int]:
        self.calls.append("memory_stats")
        flat: dict[str, int] = {}
        for key, value in self.stats[device].items():
            if isinstance(value, dict):
                for part, number in value["all"].items():
                    flat[f"{key}.all.{part}"] = number
            else:
                flat[key] = value
        return flat

    def nested_stats(self, device: int) -> dict[str, Any]:
        self.calls.append("nested")
        return self.stats[device]


def fake_torch(cuda: FakeCuda) -> Any:
    c_module = (
        SimpleNamespace(_cuda_memoryStats=cuda.nested_stats) if cuda.nested else SimpleNamespace()
    )
    return SimpleNamespace(
        __version__="9.9.9",
        cuda=cuda,
        _C=c_module,
        version=SimpleNamespace(cuda="12.8"),
        __spec__=None,
    )


def rows(sampler: CudaSampler, t: int) -> list[tuple[int, ...]]:
    return list(protocol.GPU_TABLE.row.iter_unpack(sampler.sample(t)))


@pytest.mark.parametrize("nested", [True, False])
def test_allocator_counters_become_gpu_rows(nested: bool) -> None:
    cuda = FakeCuda(nested=nested)
    sampler = CudaSampler(fake_torch(cuda))
    cuda.set(
        allocated_current=3 * GiB,
        allocated_peak=5 * GiB,
        reserved_current=6 * GiB,
        reserved_peak=6 * GiB,
        active_current=3 * GiB,
        inactive_split_current=GiB,
        num_alloc_retries=2,
        num_ooms=1,
    )
    ((t, dev, alloc, alloc_peak, res, res_peak, active, inactive, retries, ooms),) = rows(
        sampler, 7
    )
    assert (t, dev, alloc, alloc_peak, res, res_peak) == (7, 0, 3 * GiB, 5 * GiB, 6 * GiB, 6 * GiB)
    assert (active, inactive, retries, ooms) == (3 * GiB, GiB, 2, 1)
    assert ("nested" in cuda.calls) == nested


def test_the_peak_column_keeps_a_spike_between_samples_and_never_resets_the_counter() -> None:
    cuda = FakeCuda()
    sampler = CudaSampler(fake_torch(cuda))
    cuda.set(
        allocated_current=GiB, allocated_peak=GiB, reserved_current=2 * GiB, reserved_peak=2 * GiB
    )
    rows(sampler, 1)
    # A 4 GiB spike came and went between two samples: only the allocator's peak saw it.
    cuda.set(allocated_current=GiB, allocated_peak=5 * GiB)
    ((_, _, alloc, alloc_peak, *_),) = rows(sampler, 2)
    assert (alloc, alloc_peak) == (GiB, 5 * GiB)
    # Nothing new: the interval peak falls back to the readings themselves.
    cuda.set(allocated_current=2 * GiB)
    ((_, _, _, alloc_peak, *_),) = rows(sampler, 3)
    assert alloc_peak == 2 * GiB
    # The script reset its own peak counter: the new, lower peak belongs to this interval.
    cuda.set(allocated_current=GiB, allocated_peak=3 * GiB)
    ((_, _, _, alloc_peak, *_),) = rows(sampler, 4)
    assert alloc_peak == 3 * GiB


def test_devices_the_script_never_used_produce_no_rows() -> None:
    cuda = FakeCuda(devices=3)
    sampler = CudaSampler(fake_torch(cuda))
    cuda.set(device=1, reserved_current=GiB, reserved_peak=GiB)
    assert [r[1] for r in rows(sampler, 1)] == [1]
    assert [d["name"] for d in sampler.describe_devices()] == [
        "Fake GPU 0",
        "Fake GPU 1",
        "Fake GPU 2",
    ]


class Collector:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.rows: list[tuple[int, ...]] = []
        self.changed = threading.Condition()

    def on_hello(self, hello: dict[str, Any]) -> int:
        return 0

    def on_schema(self, proc: int, schema: protocol.TableSchema) -> None: ...

    def on_rows(self, proc: int, schema: protocol.TableSchema, rows: list[tuple[int, ...]]) -> None:
        if schema.name != protocol.GPU_TABLE.name:
            return  # the agent's other tables (the C heap's readings) are not under test here
        with self.changed:
            self.rows += rows
            self.changed.notify_all()

    def on_events(self, proc: int, payload: bytes, events: list[dict[str, Any]]) -> None:
        with self.changed:
            self.events += events
            self.changed.notify_all()

    def on_log(self, kind: str, **data: Any) -> None: ...

    def wait(self, condition: Any, timeout: float = 10) -> None:
        with self.changed:
            assert self.changed.wait_for(condition, timeout), "condition not met in time"


def test_the_agent_reads_nothing_from_cuda_until_the_script_initialises_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a script that imported torch but has not touched CUDA yet
    cuda = FakeCuda(initialized=False)
    monkeypatch.setitem(sys.modules, "torch", fake_torch(cuda))
    collector = Collector()
    server = AgentServer("tok", collector)
    server.start()
    agent = Agent("127.0.0.1", server.port, "tok", interval_s=0.005, hooks=False)
    agent.start()
    try:
        collector.wait(lambda: any(e["type"] == "torch_imported" for e in collector.events))
        time.sleep(0.1)  # several idle polls: still nothing but is_initialized may be called
        assert set(cuda.calls) == {"is_initialized"}
        # When the script initialises CUDA and allocates
        cuda.set(
            allocated_current=GiB,
            allocated_peak=GiB,
            reserved_current=2 * GiB,
            reserved_peak=2 * GiB,
        )
        cuda.initialized = True
        # Then the agent announces the devices and streams allocator rows
        collector.wait(lambda: any(e["type"] == "cuda_init" for e in collector.events))
        collector.wait(lambda: len(collector.rows) >= 3)
        init = next(e for e in collector.events if e["type"] == "cuda_init")
        assert init["devices"] == [{"index": 0, "name": "Fake GPU 0", "total_bytes": 80 * GiB}]
        torch_event = next(e for e in collector.events if e["type"] == "torch_imported")
        assert (torch_event["version"], torch_event["cuda"]) == ("9.9.9", "12.8")
        assert all(r[2] == GiB and r[4] == 2 * GiB for r in collector.rows)
    finally:
        agent.close()
        server.close()


def test_an_agent_failure_is_reported_once_and_sampling_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = FakeCuda()
    calls = {"n": 0}

    def flaky(device: int) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] % 2:
            raise RuntimeError("driver hiccup")
        return cuda.stats[device]

    torch = fake_torch(cuda)
    torch._C._cuda_memoryStats = flaky
    cuda.set(reserved_current=GiB, reserved_peak=GiB)
    monkeypatch.setitem(sys.modules, "torch", torch)
    collector = Collector()
    server = AgentServer("tok", collector)
    server.start()
    agent = Agent("127.0.0.1", server.port, "tok", interval_s=0.005, hooks=False)
    agent.start()
    try:
        collector.wait(lambda: len(collector.rows) >= 5)
        errors = [e for e in collector.events if e["type"] == "agent_error"]
        assert len(errors) == 1 and "driver hiccup" in errors[0]["error"]
    finally:
        agent.close()
        server.close()
