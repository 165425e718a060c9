"""Run one recording in a process of its own, for the desktop app.

    python -m profiler.recorder.host [APP_PID]

APP_PID: the app's pid. The recording process ends with the app (SIGTERM, which stops the
target as the Stop button does), also when the app died before this process got going.

stdin: one JSON line with the run request, then control lines: "stop" ends the target's
whole tree gracefully, "kill" at once, `stdin "TEXT"` (a JSON string) writes TEXT to the
target's stdin, "eof" ends it. End of input (the app went away) counts as "stop".
stdout: the recording's frames, exactly as written to the profile file, for the live view.
stderr: one line explaining why, if the target could not be started (exit status 3).

A separate process keeps the sampler's timing independent of the GUI thread (they would
share one GIL in-process), and lets the file be finished even if the app dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from typing import BinaryIO

from memsight.profiler.launch.runtime import RECORDER_HOST_FLAG
from memsight.profiler.launch.spec import agent_config_to_of, attach_pid_of, spec_from_json
from memsight.profiler.recorder import inject, lifetime
from memsight.profiler.recorder.session import Recording

START_FAILED = 3


class _FrameOut:
    """Writes frames to stdout from the recorder's threads, one whole frame at a time."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.broken = False

    def __call__(self, frame: bytes) -> None:
        if self.broken:
            return
        with self.lock:
            try:
                self.stream.write(frame)
                self.stream.flush()
            except (BrokenPipeError, OSError):
                self.broken = True  # the app went away: the file is still written


def _control(recording: Recording, fd: int) -> None:
    # Raw reads: a daemon thread blocked in a buffered readline() makes the interpreter
    # abort at exit, unable to take the buffer's lock.
    pending = b""
    while chunk := os.read(fd, 4096):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip() == b"stop":
                recording.stop()
            elif line.strip() == b"kill":
                recording.kill_tree()
            elif line.startswith(b"stdin "):  # a JSON string: what the user typed
                with contextlib.suppress(ValueError):
                    text = json.loads(line[6:])
                    if isinstance(text, str):
                        recording.send_input(text.encode("utf-8", "surrogateescape"))
            elif line.strip() == b"eof":
                recording.close_input()
    if recording.poll():
        recording.stop()  # end of input: the app is gone


def _write_private(path: str, text: str) -> None:
    """`text` into a new file only its owner can read (it holds the run's token), whole or
    not at all: written beside, then renamed."""
    temporary = f"{path}.part"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def main(args: list[str] | None = None) -> int:
    args = sys.argv[1:] if args is None else args
    if args[:1] == [RECORDER_HOST_FLAG]:  # the standalone build's way to start this
        args = args[1:]
    app_pid = int(args[0]) if args and args[0].isdigit() else None
    # The app's recording process ends with the app, even one killed with its pipes held open
    # by someone else: the kernel sends SIGTERM, which stops the target as the Stop button does.
    lifetime.die_with_parent(signal.SIGTERM, app_pid)
    stdout = sys.stdout.buffer
    request = b""
    while not request.endswith(b"\n"):
        chunk = os.read(0, 1)  # byte by byte: nothing after the request line is consumed here
        if not chunk:
            break
        request += chunk
    spec, out_path = spec_from_json(request.decode())
    attach_pid = attach_pid_of(request.decode())
    agent_config_to = agent_config_to_of(request.decode())
    recording = Recording(
        spec, out_path, stdio="capture", new_session=True, live=_FrameOut(stdout), subreaper=True
    )
    loader = None
    if attach_pid is not None:
        try:
            loader = _attach(recording, attach_pid, spec.hooks, agent_config_to)
        except (OSError, inject.InjectError) as exc:
            sys.stderr.write(f"cannot attach to pid {attach_pid}: {exc}\n")
            return START_FAILED
    else:
        try:
            recording.start()
        except OSError as exc:
            sys.stderr.write(f"cannot start {spec.python}: {exc.strerror or exc}\n")
            return START_FAILED
    threading.Thread(
        target=_control, args=(recording, 0), name="memsight-control", daemon=True
    ).start()
    signal.signal(
        signal.SIGTERM,
        lambda _s, _f: threading.Thread(target=recording.stop, daemon=True).start(),
    )
    recording.wait()
    if loader is not None:
        loader.remove()
    return 0


def _attach(
    recording: Recording, pid: int, with_agent: bool, agent_config_to: str | None = None
) -> inject.Loader | None:
    """Record the running `pid`; start its agent unless `with_agent` is false, or, with
    `agent_config_to`, leave the process to start its own (memsight.record) with the
    configuration written there. What the recording will lack is said in the profile (a
    warning), as the app shows warnings."""
    recording.attach(pid)
    if agent_config_to is not None:
        _write_private(agent_config_to, json.dumps(recording.agent_config()))
        return None
    if not with_agent:
        recording.watch_gpus_from_outside()
        return None
    try:
        return inject.start_agent(
            recording,
            pid,
            say=lambda _line: None,
            warn=lambda line: recording.event("warning", message=line),
        )
    except inject.InjectError:
        recording.detach()
        recording.wait()
        with contextlib.suppress(OSError):
            recording.out_path.unlink()
        raise


if __name__ == "__main__":
    sys.exit(main())
