"""Decode a recording's frames as they arrive into a Profile (Qt-free).

The recorder's threads only put bytes on a queue (Recording(live=LiveProfile.put)); the
consumer (the GUI's timer) calls drain() at its own pace, which decodes everything queued so
far with the same ProfileBuilder a saved file goes through.
"""

from __future__ import annotations

import queue

from memsight.profiler import protocol
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.replay import ProfileBuilder
from memsight.profiler.protocol import FrameReader


class LiveProfile:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._reader = FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
        self._builder = ProfileBuilder()
        self.problems: list[str] = []

    @property
    def profile(self) -> Profile:
        return self._builder.profile

    def put(self, frame: bytes) -> None:
        """Called from the recorder's threads: only enqueues."""
        self._queue.put(frame)

    def drain(self, budget: int = 1 << 16) -> int:
        """Decode up to `budget` queued frames; return how many were decoded."""
        count = 0
        while count < budget:
            try:
                chunk = self._queue.get_nowait()
            except queue.Empty:
                break
            self._reader.feed(chunk)
            count += 1
        for kind, payload in self._reader.frames():
            try:
                self._builder.feed(kind, payload)
            except protocol.ProtocolError as exc:  # our own recorder wrote it: should not happen
                self.problems.append(str(exc))
        self._builder.flush()
        return count
