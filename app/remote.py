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

from memsight.app.controller import LiveController
from memsight.profiler.profile.storage import ProfileError, compact_profile
from memsight.profiler.remote.client import CopyNamedByRun, StreamClient, StreamError


class RemoteController(LiveController):
    local = False  # no process here: no input to send, no pid to look at
    takes_input = False
    error_title = "The connection failed"

    def __init__(self, host: str, port: int, token: str, out_path: Path) -> None:
        super().__init__(out_path)
        self.notes: list[str] = []  # "lost; reconnecting", "reconnected at byte N"
        self.client = StreamClient(host, port, token, say=self.notes.append)
        self.copy = CopyNamedByRun(
            out_path, out_path.parent, datetime.now(), lambda _p: None, self.live
        )

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
    def ended(self) -> bool:
        """The served run's end arrived (not only the watching's)."""
        return self.client.ended
