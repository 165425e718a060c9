"""`memsight merge`: one job profile from the profiles of a multi-node job's nodes."""

from __future__ import annotations

import argparse
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
            "Clocks are aligned by each profile's wall-clock start time: exact to about 1 ms, "
            "plus whatever the machines' clocks disagree by (keep them in sync with NTP)."
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


def cmd_merge(argv: Sequence[str]) -> int:
    options = _parser().parse_args(list(argv))
    out = os.path.abspath(options.out)
    inputs = [os.path.abspath(p) for p in options.profiles]
    if out in inputs:
        sys.stderr.write(f"memsight: error: {terminal_safe(options.out)} is one of the inputs\n")
        return 2
    if os.path.exists(out) and not options.force:
        sys.stderr.write(
            f"memsight: error: {terminal_safe(options.out)} exists (--force replaces it)\n"
        )
        return 2
    try:
        merged = merge_profiles(options.profiles, options.out)
    except (ProfileError, MergeError) as exc:
        sys.stderr.write(f"memsight: error: {terminal_safe(str(exc))}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"memsight: error: {terminal_safe(options.out)}: {exc.strerror or exc}\n")
        return 1
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
        f"aligned to within about {ALIGNMENT_ERROR_MS:g} ms plus the machines' clock skew\n"
    )
    return 0
