"""`memsight attach PID`: record a Python process that is already running, and its tree.

From outside at once (RAM, USS, children, GPU memory through NVML once its agent says CUDA
is in use), and, unless --no-inject, through the agent started inside it (iterations,
censuses, holders and lines, as under `memsight run`). The recording ends at Ctrl+C, at
--duration, or when the process exits; the agent then takes every hook out and the process
goes on as before. The report follows, as `memsight run` prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from memsight.profiler.command_line import ArgumentParser, UsageError
from memsight.profiler.launch.preflight import InvalidSetting, census_from_text, interval_from_text
from memsight.profiler.launch.running import NotAttachable, attached_spec, python_process
from memsight.profiler.launch.spec import DEFAULT_INTERVAL_MS, default_profile_name
from memsight.profiler.output_path import unused_path
from memsight.profiler.terminal_text import terminal_safe
from memsight.profiler.typed_values import number_between

if TYPE_CHECKING:
    from memsight.profiler.recorder.session import Recording

MAX_DURATION_S = 366 * 24 * 3600.0
_PYTHON_EXE = re.compile(r"python[0-9.]*[a-z]?$")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="memsight attach",
        description=(
            "Record a Python process that is already running, and every process it starts, "
            "with no restart: its memory from outside at once, and, through memsight's agent "
            "started inside it (Python 3.14's sys.remote_exec, else gdb), its iterations, "
            "censuses and the lines that hold memory, as under `memsight run`. The recording "
            "ends at Ctrl+C, at --duration or when the process exits; the agent then takes "
            "every hook out, and the process goes on exactly as before."
        ),
        epilog=(
            "exit status: 0 once the profile is saved; 2 for a usage error (one line): no such "
            "process, not a Python process, ptrace not permitted, the process exiting during "
            "the attach. Where no way in exists (no gdb before Python 3.14), memsight records "
            "from outside only and says so."
        ),
    )
    parser.add_argument("pid", metavar="PID", help="the process to record")
    parser.add_argument(
        "-o",
        "--out",
        metavar="PATH",
        help="profile file to write (default: SCRIPT-YYYYMMDD-HHMMSS.memsight in the working "
        "directory, SCRIPT being the process' own)",
    )
    parser.add_argument(
        "--duration",
        metavar="SECONDS",
        help="detach after this many seconds (default: at Ctrl+C or when the process exits)",
    )
    parser.add_argument(
        "--no-inject",
        action="store_true",
        help="record from outside only: start no agent in the process (no debugger is used)",
    )
    parser.add_argument(
        "--interval-ms", metavar="N", help="sampling interval in milliseconds (default 10)"
    )
    parser.add_argument(
        "--census",
        metavar="WHEN",
        default="auto",
        help="censuses of live tensors, as for `memsight run` (default: auto)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing of memsight's own"
    )
    return parser


def cmd_attach(argv: Sequence[str]) -> int:
    from memsight.profiler.commands.run import report_saved
    from memsight.profiler.recorder import inject
    from memsight.profiler.recorder.attached import AttachedTarget
    from memsight.profiler.recorder.session import Recording

    options = build_parser().parse_args(list(argv))
    if not options.pid.isdigit() or int(options.pid) <= 0:
        raise UsageError(f"PID: {options.pid!r} is not a process id")
    pid = int(options.pid)
    if pid == os.getpid():
        raise UsageError("memsight cannot attach to itself")
    duration = None
    if options.duration is not None:
        try:
            duration = number_between(
                options.duration, 0.001, MAX_DURATION_S, "a number of seconds"
            )
        except ValueError as exc:
            raise UsageError(f"--duration: {exc}") from None
    try:
        exe, process_argv, cwd = python_process(pid)
        interval_ms = (
            DEFAULT_INTERVAL_MS
            if options.interval_ms is None
            else interval_from_text(options.interval_ms)
        )
        census = census_from_text(options.census)
    except NotAttachable as exc:
        raise UsageError(str(exc)) from None
    except InvalidSetting as exc:
        raise UsageError(exc.problem.message) from None
    spec = attached_spec(exe, process_argv, cwd, interval_ms, not options.no_inject, census)
    out = Path(options.out) if options.out else unused_path(Path(default_profile_name(spec)))

    def say(message: str) -> None:
        if not options.quiet:
            sys.stderr.write(f"memsight: {terminal_safe(message)}\n")
            sys.stderr.flush()

    def warn(message: str) -> None:  # said even with -q: the profile holds less than asked
        sys.stderr.write(f"memsight: warning: {terminal_safe(message)}\n")
        sys.stderr.flush()

    recording = Recording(spec, out)
    try:
        recording.attach(pid)
    except OSError as exc:
        raise UsageError(f"cannot record into {out}: {exc.strerror or exc}") from None
    previous = {
        sig: signal.signal(sig, lambda _s, _f: recording.detach())
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    loader = None
    try:
        say(f"attached to pid {pid} ({spec.target}); recording into {out}")
        if not options.no_inject:
            try:
                loader = inject.start_agent(recording, pid, say, warn)
            except inject.NotPermitted as exc:
                _give_up(recording, out)
                raise UsageError(
                    f"cannot start the agent in pid {pid}: {exc}; --no-inject records its "
                    "memory from outside only"
                ) from None
            except inject.Exited:
                _give_up(recording, out)
                raise UsageError(f"pid {pid} exited during the attach") from None
        else:
            recording.watch_gpus_from_outside()
        say("Ctrl+C detaches" + (f"; detaching after {duration:g} s" if duration else ""))
        if duration is not None:
            timer = threading.Timer(duration, recording.detach)
            timer.daemon = True
            timer.start()
        recording.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if loader is not None:
            loader.remove()
    exited = isinstance(recording.target, AttachedTarget) and recording.target.exited
    say("the process exited" if exited else f"detached; pid {pid} goes on")
    if not options.quiet:
        report_saved(out)
    return 0


def _give_up(recording: Recording, out: Path) -> None:
    """End a recording that the attach cannot go on with, and leave no file of it."""
    recording.detach()
    recording.wait()
    with contextlib.suppress(OSError):
        out.unlink()
