"""`memsight merge`: one job profile from the profiles of a multi-node job's nodes."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from memsight.profiler.command_line import ArgumentParser
from memsight.profiler.commands.errors import error, output_error
from memsight.profiler.output_path import OutputError, output_target
from memsight.profiler.profile.merge import (
    ALIGNMENT_ERROR_MS,
    MAX_CLOCK_SPREAD,
    MergeError,
    MergeRefused,
    merge_profiles,
)
from memsight.profiler.profile.storage import ProfileError
from memsight.profiler.terminal_text import terminal_safe


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="memsight merge",
        description=(
            "Merge the profiles that the nodes of a multi-node job wrote (each node runs "
            "`memsight run ... torchrun --nnodes K ...`) into one job profile that the app and "
            "`memsight report` open like any other. The first profile's run is the job's; "
            "every process of the others becomes a process of the job, named by its node. "
            "Clocks are aligned by each profile's wall-clock start time plus its own monotonic "
            "clock: exact to about 1 ms (the start times are in milliseconds), plus whatever "
            "the machines' wall clocks disagree by, which memsight cannot measure (keep them in "
            "sync with NTP). The job's output is the first profile's; the other profiles' "
            "output, CUDA snapshots and records of child processes without memsight's agent "
            "are left out (their own files keep them). "
            "Refused: the same profile (or the same recording: host, pid and start) twice, "
            f"and profiles that started more than {MAX_CLOCK_SPREAD.days} days apart by their "
            "wall clocks, unless --force."
        ),
        epilog="exit status: 0 when written; 1 when an input cannot be read or the output "
        "cannot be written; 2 for a usage error (an input given twice, clocks too far apart, "
        "an existing OUT without --force, OUT one of the inputs).",
    )
    parser.add_argument("profiles", nargs="+", metavar="NODE.memsight", help="the nodes' profiles")
    parser.add_argument(
        "-o", "--out", required=True, metavar="JOB.memsight", help="the job profile to write"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace OUT if it exists, and merge profiles whose wall-clock starts are more "
        f"than {MAX_CLOCK_SPREAD.days} days apart",
    )
    return parser


def _same_file(one: str, other: str) -> bool:
    """Whether two names are one file, however spelled (a link, a linked folder, a hard link)."""
    if os.path.realpath(one) == os.path.realpath(other):
        return True
    with contextlib.suppress(OSError):
        return os.path.samefile(one, other)
    return False


def _is_an_input(out: str, inputs: list[str]) -> bool:
    return any(_same_file(path, out) for path in inputs)


def _given_twice(inputs: list[str]) -> tuple[str, str] | None:
    """The first input named again later (the later name, the earlier), or None."""
    for index, path in enumerate(inputs):
        for earlier in inputs[:index]:
            if _same_file(path, earlier):
                return path, earlier
    return None


def cmd_merge(argv: Sequence[str]) -> int:
    options = build_parser().parse_args(list(argv))
    out = options.out
    if _is_an_input(out, options.profiles):
        sys.stderr.write(f"memsight: error: {terminal_safe(out)} is one of the inputs\n")
        return 2
    twice = _given_twice(options.profiles)
    if twice is not None:
        again, first = (terminal_safe(name) for name in twice)
        same = "is given twice" if twice[0] == twice[1] else f"is the same file as {first}"
        sys.stderr.write(f"memsight: error: {again} {same}: give each node's profile once\n")
        return 2
    try:
        target = output_target(out)
    except OutputError as exc:
        return output_error(exc, out, "-o")
    # Only a regular file is ever replaced; a device or a FIFO is written into, as by `>`.
    if target.exists and not options.force:
        sys.stderr.write(
            f"memsight: error: {terminal_safe(options.out)} exists (--force replaces it)\n"
        )
        return 2
    try:
        result = merge_profiles(options.profiles, target, force=options.force)
    except MergeRefused as exc:
        return error(str(exc), status=2)
    except (ProfileError, MergeError) as exc:
        return error(str(exc))
    except (OutputError, OSError) as exc:
        return output_error(exc, out, "-o")
    merged = result.inputs
    said = sys.stderr if target.stdout else sys.stdout  # `-o -`: stdout holds the profile
    for line in result.warnings:
        sys.stderr.write(f"memsight: warning: {terminal_safe(line)}\n")
    for entry in merged:
        shift = (
            "reference clock"
            if entry is merged[0]
            else f"clock shifted {entry.shift_ns / 1e6:+.1f} ms"
        )
        name = terminal_safe(entry.hostname or "?")
        said.write(f"  {terminal_safe(entry.path)}  ({name}, {shift})\n")
    said.write(
        f"memsight: wrote {terminal_safe(options.out)}: {len(merged)} profiles on one clock, "
        f"aligned to within about {ALIGNMENT_ERROR_MS:g} ms plus the machines' clock skew "
        "(not measured)\n"
    )
    return 0
