"""`memsight merge`: one job profile from the profiles of a multi-node job's nodes."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from profiler.profile.merge import ALIGNMENT_ERROR_MS, MergeError, merge_profiles
from profiler.profile.storage import ProfileError
from profiler.terminal_text import terminal_safe


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
            "are left out (their own files keep them)."
        ),
        epilog="exit status: 0 when written; 1 when an input cannot be read or the output "
        "cannot be written; 2 for a usage error.",
    )
    parser.add_argument("profiles", nargs="+", metavar="NODE.memsight", help="the nodes' profiles")
    parser.add_argument(
        "-o", "--out", required=True, metavar="JOB.memsight", help="the job profile to write"
    )
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    return parser


def _is_an_input(out: str, inputs: list[str]) -> bool:
    """Whether OUT names an input file, however spelled (a link, a linked folder)."""
    real = os.path.realpath(out)
    for path in inputs:
        if os.path.realpath(path) == real:
            return True
        with contextlib.suppress(OSError):
            if os.path.samefile(path, out):  # a hard link
                return True
    return False


def cmd_merge(argv: Sequence[str]) -> int:
    options = _parser().parse_args(list(argv))
    out = options.out
    if _is_an_input(out, options.profiles):
        sys.stderr.write(f"memsight: error: {terminal_safe(out)} is one of the inputs\n")
        return 2
    if os.path.exists(out) and not options.force:
        sys.stderr.write(
            f"memsight: error: {terminal_safe(options.out)} exists (--force replaces it)\n"
        )
        return 2
    try:
        result = merge_profiles(options.profiles, options.out)
    except (ProfileError, MergeError) as exc:
        sys.stderr.write(f"memsight: error: {terminal_safe(str(exc))}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"memsight: error: {terminal_safe(options.out)}: {exc.strerror or exc}\n")
        return 1
    merged = result.inputs
    for line in result.warnings:
        sys.stderr.write(f"memsight: warning: {terminal_safe(line)}\n")
    for entry in merged:
        shift = (
            "reference clock"
            if entry is merged[0]
            else f"clock shifted {entry.shift_ns / 1e6:+.1f} ms"
        )
        name = terminal_safe(entry.hostname or "?")
        sys.stdout.write(f"  {terminal_safe(entry.path)}  ({name}, {shift})\n")
    sys.stdout.write(
        f"memsight: wrote {terminal_safe(options.out)}: {len(merged)} profiles on one clock, "
        f"aligned to within about {ALIGNMENT_ERROR_MS:g} ms plus the machines' clock skew "
        "(not measured)\n"
    )
    return 0
