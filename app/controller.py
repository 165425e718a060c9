"""Drive one recording from the GUI without letting recorder threads touch Qt.

The recorder's threads put frames on LiveProfile's queue; a background thread waits for the
target to exit and leaves its status in a plain attribute. The window's timer calls poll(),
which drains the queue into the model and reports what changed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from profiler.launch import RunSpec
from profiler.live import LiveProfile
from profiler.model import Profile
from profiler.recorder.session import ExitStatus, Recording


@dataclass
class PollResult:
    frames: int
    finished: ExitStatus | None


class RunController:
    def __init__(self, spec: RunSpec, out_path: Path) -> None:
        self.spec = spec
        self.out_path = out_path
        self.live = LiveProfile()
        self.recording = Recording(
            spec, out_path, stdio="capture", new_session=True, live=self.live.put
        )
        self.status: ExitStatus | None = None
        self.error: str | None = None
        self._reported = False
        self._waiter: threading.Thread | None = None
        self.stopping = False

    @property
    def profile(self) -> Profile:
        return self.live.profile

    def start(self) -> None:
        """Launch the target; raises OSError when the interpreter cannot be started."""
        self.recording.start()
        self._waiter = threading.Thread(target=self._wait, name="memsight-gui-wait", daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        try:
            self.status = self.recording.wait()
        except Exception as exc:  # reported on the GUI thread by poll()
            self.error = str(exc)
            self.status = ExitStatus(None, None)

    def stop(self) -> None:
        """End the whole process tree (in the background: it may wait up to the grace time)."""
        if self.stopping or self.status is not None:
            return
        self.stopping = True
        threading.Thread(target=self.recording.stop, name="memsight-gui-stop", daemon=True).start()

    @property
    def running(self) -> bool:
        return self.status is None

    def poll(self) -> PollResult:
        frames = self.live.drain()
        finished = None
        if self.status is not None and not self._reported and self._waiter is not None:
            self._waiter.join(timeout=0)
            if not self._waiter.is_alive():
                frames += self.live.drain()
                finished = self.status
                self._reported = True
        return PollResult(frames, finished)
