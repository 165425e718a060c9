"""The agent's connection to the recorder and its background thread.

One daemon thread samples torch.cuda's allocator statistics (once the script has initialised
CUDA) and sends queued events and sample rows every FLUSH_S seconds. The script's own threads
only append to the queue under a lock; they never touch the socket.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Set

from .. import protocol
from ..protocol import GPU_TABLE, encode_json_frame

FLUSH_S = 0.1
EVENTS_PER_FRAME = 500  # keeps every frame far below the recorder's size limit
IDLE_POLL_S = 0.05  # how often to look for torch / CUDA before CUDA is in use


def start_agent(config: Dict[str, Any]) -> "Agent":
    agent = Agent(
        host=str(config.get("host", "127.0.0.1")),
        port=int(config["port"]),
        token=str(config["token"]),
        interval_s=max(float(config.get("interval_ms", 10)) / 1000.0, 0.0005),
    )
    agent.start()
    return agent


class Agent:
    def __init__(self, host: str, port: int, token: str, interval_s: float) -> None:
        self.pid = os.getpid()
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._events: List[Dict[str, Any]] = []
        self._rows = bytearray()
        self._stop = threading.Event()
        self._closed = False
        self._errors: Set[str] = set()
        self._torch: Any = None
        self._cuda: Any = None  # CudaSampler once the script initialised CUDA
        self._sock = socket.create_connection((host, port), timeout=10)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hello = {
            "python_version": "%d.%d.%d" % sys.version_info[:3],
            "executable": sys.executable,
        }
        self._sock.sendall(protocol.hello_frame(token, self.pid, hello) + GPU_TABLE.frame())
        self._thread = threading.Thread(target=self._loop, name="memsight-agent", daemon=True)
        os.register_at_fork(after_in_child=self._forked)

    def start(self) -> None:
        self._thread.start()
        import atexit

        # Registered before any of the script's handlers, so it runs after all of them.
        atexit.register(self.close)

    # -- API used from the target's threads -------------------------------------------------

    def event(self, type_: str, **data: Any) -> None:
        if self._closed or os.getpid() != self.pid:
            return
        data["t"] = time.monotonic_ns()
        data["type"] = type_
        with self._lock:
            self._events.append(data)

    def error(self, where: str, exc: BaseException) -> None:
        """Report an agent failure once per place; the script is never disturbed."""
        if where in self._errors:
            return
        self._errors.add(where)
        self.event("agent_error", where=where, error="%s: %s" % (type(exc).__name__, exc))

    def report_exception(self, exc: BaseException, uncaught: bool) -> None:
        try:
            from .runner import format_traceback

            exc_type = type(exc)
            self.event(
                "exception",
                exc_type="%s.%s" % (exc_type.__module__, exc_type.__qualname__),
                message=str(exc)[:20000],
                traceback=format_traceback(exc.__traceback__),
                uncaught=uncaught,
            )
        except Exception as err:
            self.error("report_exception", err)

    def close(self) -> None:
        if self._closed or os.getpid() != self.pid:
            return
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        try:
            self._sample_once()
            self._closed = True
            self._send_pending()
        finally:
            self._closed = True
            with contextlib.suppress(OSError):
                self._sock.close()

    # -- background thread ------------------------------------------------------------------

    def _loop(self) -> None:
        next_flush = time.monotonic() + FLUSH_S
        while not self._stop.is_set():
            self._sample_once()
            now = time.monotonic()
            if now >= next_flush:
                next_flush = now + FLUSH_S
                if not self._send_pending():
                    return
            self._stop.wait(self.interval_s if self._cuda is not None else IDLE_POLL_S)

    def _sample_once(self) -> None:
        try:
            if self._torch is None:
                self._find_torch()
            if self._torch is not None and self._cuda is None:
                self._find_cuda()
            if self._cuda is not None:
                rows = self._cuda.sample(time.monotonic_ns())
                with self._lock:
                    self._rows += rows
        except Exception as exc:
            self.error("sampler", exc)

    def _find_torch(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            return
        spec = getattr(torch, "__spec__", None)
        if spec is not None and getattr(spec, "_initializing", False):
            return  # still being imported by the script
        self._torch = torch
        version = getattr(torch, "version", None)
        self.event(
            "torch_imported",
            version=str(getattr(torch, "__version__", "")),
            cuda=getattr(version, "cuda", None),
        )

    def _find_cuda(self) -> None:
        cuda = getattr(self._torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return
        from .cuda import CudaSampler

        sampler = CudaSampler(self._torch)
        self.event("cuda_init", devices=sampler.describe_devices())
        self._cuda = sampler

    def _send_pending(self) -> bool:
        with self._lock:
            events, self._events = self._events, []
            rows, self._rows = bytes(self._rows), bytearray()
        frames = []
        if rows:
            frames.append(GPU_TABLE.rows_frame(rows))
        for start in range(0, len(events), EVENTS_PER_FRAME):
            batch = events[start : start + EVENTS_PER_FRAME]
            try:
                frames.append(encode_json_frame(protocol.EVENTS, batch))
            except (TypeError, ValueError):
                frames.append(encode_json_frame(protocol.EVENTS, _plain(batch)))
        if not frames:
            return True
        try:
            self._sock.sendall(b"".join(frames))
            return True
        except OSError:
            self._closed = True  # the recorder is gone; the script carries on alone
            return False

    def _forked(self) -> None:
        # A fork child (a DataLoader worker, say) inherits a copy of the socket and maybe a
        # held lock, but not the thread: it must never write to the parent's stream.
        self._closed = True
        self._lock = threading.Lock()
        with contextlib.suppress(OSError):
            self._sock.close()


def _plain(value: Any) -> Any:
    """`value` made JSON-safe: NaN and infinities become None, unknown objects their repr."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return repr(value)[:1000]
