"""The process's memory state, and the out-of-memory errors the instrumentation observes.

The RSS and the current CUDA device's allocator counters are read for the step rows
(steps.py) and, together as memory_state, for each `oom_observed` event and the agent's
`exception` events.

OOMs: CUDA's allocator OOM observer (attached once the script has initialised CUDA, never
before: CUDA is never initialised here) and forward spans that end in an OOM exception (caught
by the script or not: spans.py); the agent adds sys.monitoring RAISE events on Python 3.12+
and uncaught errors.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from .port import AgentPort


class MemoryState:
    """Instrumentation's memory readings and OOM observation (a mixin: see instrument.py)."""

    # Of Instrumentation's other parts.
    agent: AgentPort
    torch: Any
    phase: Optional[str]
    steps: int

    def _init_memory(self) -> None:
        self._observer_attached = False
        self._statm: Optional[int] = None
        self._page_size = 0  # read with the first RSS

    def memory_state(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {}
        rss = self._rss()
        if rss is not None:
            state["rss"] = rss
        cuda = self._cuda_state()
        if cuda is not None:
            state["cuda"] = cuda
        return state

    def _cuda_in_use(self) -> bool:
        # Looked up each time, not bound once: torch.cuda may be replaced after install
        # (tests and some launchers stand in their own).
        cuda = getattr(self.torch, "cuda", None)
        return cuda is not None and bool(cuda.is_initialized())

    def _cuda_state(self) -> Optional[Dict[str, Any]]:
        """The current device and its allocator's counters; None without CUDA in use."""
        cuda = getattr(self.torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None
        try:
            device = int(cuda.current_device())
            stats = self.agent.cuda_reader().read(device)
            return {"device": device, **stats}
        except Exception as exc:
            self.agent.error("memory_state", exc)
            return None

    def _rss(self) -> Optional[int]:
        try:
            if self._statm is None:
                self._page_size = os.sysconf("SC_PAGE_SIZE")
                self._statm = os.open("/proc/self/statm", os.O_RDONLY)
            return int(os.pread(self._statm, 256, 0).split()[1]) * self._page_size
        except (OSError, ValueError, IndexError, AttributeError):
            return None

    # -- out-of-memory capture ----------------------------------------------------------------

    def _attach_oom_observer(self) -> None:
        cuda = getattr(self.torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return
        self._observer_attached = True
        attach = getattr(
            getattr(self.torch, "_C", None), "_cuda_attach_out_of_memory_observer", None
        )
        if attach is None:
            return
        try:
            attach(self._oom_observed)
        except Exception as exc:
            self.agent.error("oom_observer", exc)

    def _oom_observed(self, device: int, requested: int, limit: int, free: int) -> None:
        try:
            self.agent.event(
                "oom_observed",
                device=int(device),
                requested=int(requested),
                limit=int(limit),
                free=int(free),
                phase=self.phase,
                iteration=self.steps,
                memory=self.memory_state(),
            )
            # The allocator's block list (and a snapshot under --cuda-history): agent/snapshots.py
            cuda_oom = getattr(self.agent, "cuda_oom", None)
            if cuda_oom is not None:
                cuda_oom(int(device), int(requested))
        except Exception as exc:
            self.agent.error("oom_observed", exc)

    def observe_exception(self, exc: BaseException, where: str) -> None:
        self.agent.report_exception(exc, where=where)
