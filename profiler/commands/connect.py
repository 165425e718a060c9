"""`memsight connect HOST:PORT --token TOKEN`: receive a run served by `memsight run --serve`.

The viewer keeps a local copy of the profile, byte for byte the served stream (a profile),
from the run's very first sample whenever it joins; a dropped connection is made again and
the copy goes on where it stopped. When the run ends, the copy is reported as `memsight run`
reports its own profile, and the command exits with the run's exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType

from memsight.profiler.command_line import ArgumentParser, UsageError
from memsight.profiler.launch.spec import ExitStatus
from memsight.profiler.output_path import OutputError, output_target
from memsight.profiler.profile.storage import ProfileError, compact_profile, load_profile
from memsight.profiler.remote.client import (
    RETRY_S,
    CopyFailed,
    CopyNamedByRun,
    Refused,
    StreamClient,
    StreamError,
)
from memsight.profiler.remote.wire import parse_address
from memsight.profiler.terminal_text import terminal_safe

TOKEN_ENV = "MEMSIGHT_TOKEN"
NOT_ENDED = 1  # the exit status when the run's end never arrived
COPY_FAILED = 1  # ... and when the local copy could not be written


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="memsight connect",
        description=(
            "Receive a run that `memsight run --serve [HOST:]PORT ...` is recording, from its "
            "first sample on however late you join, and keep a copy of its profile. Typical "
            "use, for a run on a remote machine: `ssh -L 8765:127.0.0.1:8765 gpu-box` in one "
            "terminal, then `memsight connect 127.0.0.1:8765 --token TOKEN` here. A dropped "
            "connection is made again, and nothing is lost. The app's File > Connect does the "
            "same with the live view."
        ),
        epilog=(
            "exit status: the run's own exit status once it has ended (as `memsight run`); 2 "
            "when the server cannot be reached or refuses (a wrong token); 1 when the "
            "connection was lost for good before the run ended (the copy keeps what came), or "
            "when the copy cannot be written (a full disk)."
        ),
    )
    parser.add_argument("address", metavar="[HOST:]PORT", help="where the run is served")
    parser.add_argument(
        "--token",
        help=f"the token the server printed (default: ${TOKEN_ENV}, which keeps it out of the "
        "process list)",
    )
    parser.add_argument(
        "-o",
        "--out",
        metavar="PATH",
        help="the local copy of the profile (default: SCRIPT-YYYYMMDD-HHMMSS.memsight in the "
        "working directory, SCRIPT being the served run's)",
    )
    parser.add_argument(
        "--retry",
        metavar="SECONDS",
        type=float,
        default=RETRY_S,
        help=f"how long to keep reconnecting after the connection is lost (default {RETRY_S:g})",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    return parser


def cmd_connect(argv: Sequence[str]) -> int:
    from memsight.profiler.commands.run import report_saved

    options = build_parser().parse_args(list(argv))
    try:
        host, port = parse_address(options.address)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if options.out is not None:
        try:
            output_target(options.out)
        except OutputError as exc:
            raise UsageError(f"--out: {exc.problem}") from None
    token = options.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise UsageError(f"--token is required (or ${TOKEN_ENV}): the server printed it")
    if not options.retry >= 0:
        raise UsageError("--retry: a number of seconds, 0 or more")

    def say(line: str) -> None:
        if not options.quiet:
            sys.stderr.write(f"memsight: {terminal_safe(line)}\n")
            sys.stderr.flush()

    client = StreamClient(host, port, token, retry_s=options.retry, say=say)
    sink = CopyNamedByRun(
        Path(options.out) if options.out else None,
        Path.cwd(),
        datetime.now(),
        lambda path: say(f"receiving {client.address} into {path}"),
    )
    failure: list[StreamError] = []

    def receive() -> None:
        try:
            client.receive(sink)
        except StreamError as exc:
            failure.append(exc)

    # Received in a thread, so that Ctrl+C stops it at once with the copy kept.
    receiver = threading.Thread(target=receive, name="memsight-connect", daemon=True)
    interrupted = False

    def on_interrupt(_signum: int, _frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        client.stop()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        receiver.start()
        while receiver.is_alive():
            receiver.join(timeout=0.5)  # in steps: the main thread must run to take Ctrl+C
    finally:
        signal.signal(signal.SIGINT, previous)
    path = sink.close()
    if failure and isinstance(failure[0], CopyFailed):  # as an output a command cannot write
        sys.stderr.write(f"memsight: error: connect: {terminal_safe(str(failure[0]))}\n")
        return COPY_FAILED
    # Nothing received, or refused (a wrong token): the one line of a usage error, status 2.
    if failure and (client.offset == 0 or isinstance(failure[0], Refused)):
        raise UsageError(f"connect: {failure[0]}")
    if path is None:
        raise UsageError(f"connect: {client.address} sent no run")
    if failure:
        say(f"{failure[0]}; the copy {path} holds the run up to there")
    elif interrupted:
        say(f"stopped receiving; the copy {path} holds the run up to there")
    if client.ended:
        # As the recorder does with its own file: large blocks, the same profile, smaller.
        with contextlib.suppress(ProfileError, OSError, MemoryError, ValueError):
            compact_profile(path)
    if not options.quiet:
        report_saved(path)
    if interrupted:
        return 130
    if not client.ended:
        return NOT_ENDED
    try:
        info = load_profile(path).info
    except ProfileError:
        return NOT_ENDED
    return ExitStatus(info.exit_code, info.signal).shell_code
