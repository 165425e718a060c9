"""Drive the view of a run served elsewhere (File → Connect…), as RunController drives a
local one: the same LiveProfile fed from a StreamClient instead of a recording process.

The stream is received on a thread that writes the local copy and queues the frames; the
window's timer calls poll() as for a local run. Stop ends the watching, not the run: it goes
on where it is served, and the copy keeps what has come.
"""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime
from pathlib import Path

from memsight.app.controller import PollResult
from memsight.profiler.launch.spec import ExitStatus
from memsight.profiler.profile.live import LiveProfile
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.storage import ProfileError, compact_profile
from memsight.profiler.remote.client import CopyNamedByRun, StreamClient, StreamError


class RemoteController:
    local = False  # no process here: no input to send, no pid to look at
    takes_input = False
    error_title = "The connection failed"

    def __init__(self, host: str, port: int, token: str, out_path: Path) -> None:
        self.out_path = out_path
        self.live = LiveProfile()
        self.live.profile.source = str(out_path)
        self.notes: list[str] = []  # "lost; reconnecting", "reconnected at byte N"
        self.client = StreamClient(host, port, token, say=self.notes.append)
        self.copy = CopyNamedByRun(
            out_path, out_path.parent, datetime.now(), lambda _p: None, self.live
        )
        self.error: str | None = None
        self.stopping = False
        self._done = threading.Event()
        self._reported = False

    @property
    def profile(self) -> Profile:
        return self.live.profile

    @property
    def address(self) -> str:
        return self.client.address

    def start(self) -> None:
        threading.Thread(target=self._receive, name="memsight-gui-remote", daemon=True).start()

    def _receive(self) -> None:
        try:
            self.client.receive(self.copy)
        except StreamError as exc:
            self.error = str(exc)
        finally:
            self.copy.close()
            if self.client.ended:
                with contextlib.suppress(ProfileError, OSError, MemoryError, ValueError):
                    compact_profile(self.out_path)
            self._done.set()

    def stop(self) -> None:
        """Stop watching: the served run goes on."""
        if not self.stopping and self.running:
            self.stopping = True
            self.client.stop()

    def kill(self) -> None:
        self.stop()

    def send_input(self, _text: str) -> None:
        """A served run's stdin is where it runs: nothing is sent from here."""

    def close_input(self) -> None:
        """As send_input."""

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    @property
    def ended(self) -> bool:
        """The served run's end arrived (not only the watching's)."""
        return self.client.ended

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def poll(self) -> PollResult:
        frames = self.live.drain()
        finished = None
        if self._done.is_set() and not self._reported:
            frames += self.live.drain()
            info = self.profile.info
            finished = ExitStatus(info.exit_code, info.signal)
            self._reported = True
        return PollResult(frames, finished)
