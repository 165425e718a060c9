"""`memsight export PROFILE --memory-viz OUT.pickle`: a CUDA memory snapshot kept in the
profile, written as torch.cuda.memory._dump_snapshot writes it, for pytorch.org/memory_viz."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memsight.profiler.command_line import ArgumentParser, UsageError
from memsight.profiler.commands.errors import error, output_error
from memsight.profiler.profile.storage import ProfileError, load_profile
from memsight.profiler.terminal_text import terminal_safe
from memsight.profiler.typed_values import integer_between, shown
from memsight.profiler.units import format_bytes


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="memsight export",
        description=(
            "Write what a saved profile holds in another tool's format. --memory-viz writes a "
            "CUDA memory snapshot (the allocator's segments, blocks and, with history, the "
            "stack of each allocation and its last alloc/free events) as the pickle "
            "torch.cuda.memory._dump_snapshot writes, which https://pytorch.org/memory_viz "
            "opens. A run keeps snapshots when recorded with `memsight run --cuda-history`: "
            "one at each out-of-memory error (up to 3) and one at exit."
        ),
        epilog="exit status: 0 when written; 1 when the profile cannot be read, holds no such "
        "snapshot, or the file cannot be written; 2 for a usage error.",
    )
    parser.add_argument("profile", metavar="PROFILE", help="a .memsight profile file")
    parser.add_argument(
        "--memory-viz",
        metavar="OUT.pickle",
        help="write the CUDA memory snapshot to this file (replaced if it exists)",
    )
    parser.add_argument(
        "--at",
        metavar="WHICH",
        default=None,
        help="which snapshot: oom (the last one taken at an out-of-memory error), exit, or its "
        "number N as --list shows it (default: oom if there is one, else the last)",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the profile's CUDA memory snapshots and exit"
    )
    return parser


MAX_SNAPSHOT_NUMBER = 1_000_000


def _snapshot_choice(text: str) -> str:
    """--at's WHICH, read before the profile: oom, exit or a snapshot number (ASCII digits)."""
    which = text.strip(" \t").lower()
    if which in ("oom", "exit"):
        return which
    try:
        return str(integer_between(which, 0, MAX_SNAPSHOT_NUMBER, "a snapshot number"))
    except ValueError:
        raise UsageError(
            f"--at: expected oom, exit or a snapshot number from 0 to {MAX_SNAPSHOT_NUMBER:,}, "
            f"not {shown(text)}"
        ) from None


def cmd_export(argv: Sequence[str]) -> int:
    from memsight.profiler.output_path import OutputError, output_target, write_output
    from memsight.profiler.profile.attachments import (
        choose_snapshot,
        cuda_snapshots,
        describe_snapshot,
    )
    from memsight.profiler.profile.storage import read_attachment

    options = build_parser().parse_args(argv)
    if options.memory_viz is None and not options.list:
        raise UsageError("export: say what to write, e.g. --memory-viz OUT.pickle")
    if options.at is not None:
        options.at = _snapshot_choice(options.at)
    try:
        profile = load_profile(options.profile)
    except ProfileError as exc:
        return error(str(exc))
    snapshots = cuda_snapshots(profile)
    if options.list:
        if not snapshots:
            sys.stdout.write("no CUDA memory snapshots\n")
        for snapshot in snapshots:
            sys.stdout.write(f"{terminal_safe(describe_snapshot(snapshot))}\n")
        return 0
    if not snapshots:
        sys.stderr.write(
            f"memsight: error: {terminal_safe(options.profile)} holds no CUDA memory snapshot; "
            "record one with `memsight run --cuda-history ...` on a run that uses CUDA\n"
        )
        return 1
    try:
        chosen = choose_snapshot(snapshots, options.at)
    except ValueError as exc:
        sys.stderr.write(f"memsight: error: --at: {exc}\n")
        return 1
    target = options.memory_viz
    try:
        write_output(
            output_target(target),
            read_attachment(options.profile, chosen.attachment_id, chosen.bytes, chosen.sha256),
        )
    except ProfileError as exc:
        return error(str(exc))
    except (OutputError, OSError) as exc:
        return output_error(exc, target, "--memory-viz")
    wrote = terminal_safe(f"{target} ({format_bytes(chosen.bytes)}): {describe_snapshot(chosen)}")
    sys.stderr.write(
        f"memsight: wrote {wrote}\n"
        "memsight: open it at https://pytorch.org/memory_viz (it stays on your computer)\n"
    )
    return 0
