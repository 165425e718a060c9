"""Drive one recording from the GUI without letting recording work touch the GUI thread.

The recording runs in its own process (profiler.recorder.host), so the sampler's timing never
depends on how busy the GUI is. A reader thread moves the frames it streams onto
LiveProfile's queue; the window's timer calls poll(), which decodes them into the model.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import memsight
from memsight.profiler.launch.runtime import recorder_host_command
from memsight.profiler.launch.spec import ExitStatus, RunSpec, spec_to_json
from memsight.profiler.profile.live import LiveProfile
from memsight.profiler.profile.model import Profile

# Run the host from the folder holding the memsight package: `-m` puts the working
# directory first on sys.path, and the app's own working directory may hold anything.
PACKAGE_PARENT = Path(memsight.__file__).resolve().parent.parent


@dataclass
class PollResult:
    frames: int
    finished: ExitStatus | None


class LiveController:
    """What the session polls, for any kind of run: a profile fed from a reader thread, and
    whether that thread has ended (then the run is reported finished, once)."""

    def __init__(self, out_path: Path) -> None:
        self.out_path = out_path
        self.live = LiveProfile()
        # The file the run is written to names it (in an exported report too) from the start.
        self.live.profile.source = str(out_path)
        self.error: str | None = None
        self.stopping = False
        self._done = threading.Event()
        self._reported = False

    @property
    def profile(self) -> Profile:
        return self.live.profile

    @property
    def running(self) -> bool:
        return not self._done.is_set()

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


class RunController(LiveController):
    local = True  # the run is a process here: input can be sent, its pid looked at
    error_title = "The recording failed"

    def __init__(self, spec: RunSpec, out_path: Path, attach_pid: int | None = None) -> None:
        """`attach_pid`: record that running process (described by `spec`) instead of
        launching `spec`; Stop then detaches, and the process goes on."""
        super().__init__(out_path)
        self.spec = spec
        self.attach_pid = attach_pid
        # The script's stdin is the app's input line only for a run the app launched.
        self.takes_input = attach_pid is None
        self.host: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Start the recording process; raises OSError when the run cannot be launched."""
        self.host = subprocess.Popen(
            recorder_host_command(),
            cwd=PACKAGE_PARENT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.host.stdin is not None
        request = spec_to_json(self.spec, self.out_path, self.attach_pid)
        self.host.stdin.write(request.encode() + b"\n")
        self.host.stdin.flush()
        self._reader = threading.Thread(target=self._read, name="memsight-gui-frames", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.host is not None and self.host.stdout is not None
        stdout = self.host.stdout
        while chunk := os.read(stdout.fileno(), 1 << 16):
            self.live.put(chunk)
        code = self.host.wait()
        assert self.host.stderr is not None
        if code != 0:
            message = self.host.stderr.read().decode(errors="replace").strip()
            self.error = (
                message.splitlines()[-1] if message else f"the recorder exited with status {code}"
            )
        # The recording process is gone: its pipes are of no more use (unclosed, they leak
        # three descriptors per run).
        for pipe in (self.host.stdin, stdout, self.host.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._done.set()

    def _send(self, command: bytes) -> None:
        if self.host is not None and self.host.stdin is not None:
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                self.host.stdin.write(command + b"\n")
                self.host.stdin.flush()

    def stop(self) -> None:
        """End the whole process tree: SIGTERM, then SIGKILL after a grace period."""
        if not self.stopping and self.running:
            self.stopping = True
            self._send(b"stop")

    def kill(self) -> None:
        self._send(b"kill")

    def send_input(self, text: str) -> None:
        """What the user typed, to the script's stdin."""
        self._send(b"stdin " + json.dumps(text).encode())

    def close_input(self) -> None:
        """End of file on the script's stdin (Ctrl+D)."""
        self._send(b"eof")
