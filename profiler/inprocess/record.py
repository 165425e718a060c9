"""`memsight.record`: record a block of the current process into an ordinary profile.

The sampling runs outside the process, as for every run: a recording process (the app's,
recorder/host.py) attaches to this pid and watches it and its children. The agent runs here,
started directly (no debugger: this is the process itself) with the address and token that
recording process writes into a private file. When the block ends, however it ends (an
exception, KeyboardInterrupt from a notebook's stop button), the agent takes every hook out
at once, in this thread, and the recording process closes the profile: `memsight report`,
the app and `compare` read it as any other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ContextDecorator
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import memsight
from memsight.profiler.launch.preflight import census_from_text
from memsight.profiler.launch.runtime import recorder_host_command
from memsight.profiler.launch.spec import DEFAULT_INTERVAL_MS, RunSpec, spec_to_json
from memsight.profiler.output_path import unused_path

START_TIMEOUT_S = 60.0  # the recording process' start (imports numpy and psutil)
END_TIMEOUT_S = 120.0  # the profile's close and compaction
PACKAGE_PARENT = Path(memsight.__file__).resolve().parent.parent


class RecordError(RuntimeError):
    """The recording could not start or end; the message says why."""


class record(ContextDecorator):  # a function to its users: `with memsight.record():`
    """Record a block of this process, and its child processes, into a profile.

    ::

        with memsight.record("train.memsight"):
            train(model, loader)

        @memsight.record("step.memsight")
        def step(): ...

    `out`: the profile to write (default: NAME-YYYYMMDD-HHMMSS.memsight in the working
    directory, NAME being the script's, or "python"). `census`: "auto", "never" or "every-N",
    as for `memsight run --census`. `interval_ms`: the sampling interval. `hooks`: False
    records memory only, with no PyTorch instrumentation. After the block, `path` is the
    profile written. A recording cannot be nested in another of the same process.
    """

    _active: record | None = None

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        census: str = "auto",
        interval_ms: float = DEFAULT_INTERVAL_MS,
        hooks: bool = True,
    ) -> None:
        self.census = census_from_text(census)
        if not 0.5 <= interval_ms <= 60_000:
            raise ValueError(f"interval_ms must be from 0.5 to 60000, not {interval_ms!r}")
        self.interval_ms = float(interval_ms)
        self.hooks = hooks
        self._out = Path(out) if out is not None else None
        self.path: Path | None = None
        self._host: subprocess.Popen[bytes] | None = None
        self._agent: Any = None
        self._folder: str | None = None

    # ContextDecorator calls _recreate_cm for each call of a decorated function: each call is a
    # recording of its own, into the same path (the last call's stays).
    def _recreate_cm(self) -> record:
        return record(self._out, census=self.census, interval_ms=self.interval_ms, hooks=self.hooks)

    def __enter__(self) -> record:
        from memsight.profiler.agent.client import recording_agent

        if record._active is not None:
            raise RecordError("a memsight recording of this process is already running")
        if recording_agent() is not None:
            raise RecordError(
                "memsight records this process already (memsight run, or an attach): its "
                "profile has this block too"
            )
        self.path = (self._out or Path(_default_name())).absolute()
        self._folder = tempfile.mkdtemp(prefix="memsight-record-")
        config_file = os.path.join(self._folder, "agent.json")
        spec = RunSpec(
            target=sys.argv[0] if sys.argv and sys.argv[0] else "python",
            args=tuple(sys.argv[1:]),
            cwd=os.getcwd(),
            python=sys.executable,
            interval_ms=self.interval_ms,
            hooks=self.hooks,
            census=self.census if self.hooks else "never",
        )
        request = spec_to_json(spec, self.path, attach_pid=os.getpid(), agent_config_to=config_file)
        try:
            self._host = subprocess.Popen(
                recorder_host_command(),  # it ends with this process
                cwd=PACKAGE_PARENT,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            self._cleanup()
            raise RecordError(f"cannot start memsight's recording process: {exc}") from None
        assert self._host.stdin is not None
        self._host.stdin.write(request.encode() + b"\n")
        self._host.stdin.flush()
        config = self._wait_for(config_file)
        if self.hooks:
            from memsight.profiler.agent.attach import attach

            self._agent = attach(config)
        record._active = self
        return self

    def _wait_for(self, config_file: str) -> str:
        """The agent's configuration, once the recording process has attached."""
        assert self._host is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(config_file):
            if self._host.poll() is not None or time.monotonic() > deadline:
                why = self._host_error() or "it did not start in time"
                self._stop_host()
                self._cleanup()
                raise RecordError(f"memsight could not start recording: {why}")
            time.sleep(0.01)
        with open(config_file) as file:
            return file.read()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._agent is not None:
                self._agent.detach()  # every hook out, now, whatever ended the block
                self._agent = None
        finally:
            record._active = None
            self._stop_host()
            self._cleanup()

    def _stop_host(self) -> None:
        host = self._host
        if host is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert host.stdin is not None
            host.stdin.write(b"stop\n")
            host.stdin.close()  # end of input: stop, also for a host that missed the line
        try:
            host.wait(timeout=END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait()
        if host.stderr is not None:
            host.stderr.close()
        self._host = None

    def _host_error(self) -> str | None:
        host = self._host
        if host is None or host.stderr is None or host.poll() is None:
            return None
        lines = host.stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"its exit status was {host.returncode}"

    def _cleanup(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _default_name() -> str:
    script = sys.argv[0] if sys.argv else ""
    stem = Path(script).stem if script and not script.startswith("-") else ""
    if not stem or "ipykernel" in script or stem == "__main__":
        stem = "python"
    return str(unused_path(Path(f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}.memsight")))
