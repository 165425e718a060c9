"""The `memsight` command line: which command, then that command's module (profiler/commands/).
Headless: nothing here imports Qt.

memsight                                 open the GUI
memsight FILE                            GUI with a script (.py) or a saved profile opened
memsight run [options] SCRIPT [ARGS...]  record headless (or -m MODULE [ARGS...])
memsight report PROFILE [--html OUT.html] [--json]   findings, peaks and the end of a saved run
memsight export PROFILE --memory-viz OUT.pickle      a CUDA memory snapshot for memory_viz
memsight compare BEFORE AFTER                        what a change did
memsight merge NODE.memsight... -o JOB.memsight      one job profile from a job's nodes
memsight connect [HOST:]PORT --token TOKEN           a run served by `run --serve`, live
memsight attach PID [--duration S] [--no-inject]     record a Python process already running
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from memsight import profiler
from memsight.profiler.command_line import UsageError
from memsight.profiler.terminal_text import terminal_safe

TOP_HELP = """\
memsight — a memory profiler for PyTorch scripts.

usage:
  memsight                                 open the desktop app
  memsight FILE                            open a script (.py) or a saved profile in the app
  memsight run [options] SCRIPT [ARGS...]  record a run headless
  memsight run [options] -m MODULE [ARGS...]
  memsight report PROFILE [--html OUT.html] [--json]
                                           what went wrong and how to fix it, peaks, the
                                           run's end; --html writes a self-contained page
  memsight export PROFILE --memory-viz OUT.pickle
                                           the CUDA memory snapshot of a run recorded with
                                           --cuda-history, for pytorch.org/memory_viz
  memsight compare BEFORE AFTER [--json] [--max-growth PCT]
                                           what a change did: peaks, growth per iteration,
                                           time per iteration, findings resolved and new
  memsight merge NODE.memsight... -o JOB.memsight
                                           one job profile from the profiles each node of a
                                           multi-node job wrote, on one clock
  memsight attach PID [-o PATH] [--duration SECONDS] [--no-inject]
                                           record a Python process that is already running
                                           (and its workers), then detach and leave it as
                                           it was
  memsight connect [HOST:]PORT --token TOKEN [-o COPY.memsight]
                                           receive a run that `memsight run --serve PORT`
                                           records (here or through ssh -L), with a copy of
                                           its profile

`memsight run` runs the script exactly as `python SCRIPT ARGS...` would (same argv, working
directory, stdin, environment and exit status) while recording RAM and GPU memory to a
profile file, then diagnoses it (docs/rules.md). `memsight COMMAND --help` describes each
command.

options:
  -h, --help     show this help and exit
  --version      print the version and exit
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # Each command's module is imported when it is asked for: `memsight run` of a short script
    # pays for what it uses, not for numpy and every other command (docs/architecture.md,
    # "Targets": the cost of a run's start and end).
    try:
        if args[:1] == ["run"]:
            from memsight.profiler.commands.run import cmd_run

            return cmd_run(args[1:], end_like_target=argv is None)
        if args[:1] == ["report"]:
            from memsight.profiler.commands.report import cmd_report

            return cmd_report(args[1:])
        if args[:1] == ["export"]:
            from memsight.profiler.commands.export import cmd_export

            return cmd_export(args[1:])
        if args[:1] == ["compare"]:
            from memsight.profiler.commands.compare import cmd_compare

            return cmd_compare(args[1:])
        if args[:1] == ["attach"]:
            from memsight.profiler.commands.attach import cmd_attach

            return cmd_attach(args[1:])
        if args[:1] == ["connect"]:
            from memsight.profiler.commands.connect import cmd_connect

            return cmd_connect(args[1:])
        if args[:1] == ["merge"]:
            from memsight.profiler.commands.merge import cmd_merge

            return cmd_merge(args[1:])
        if args[:1] in (["-h"], ["--help"]):
            sys.stdout.write(TOP_HELP)
            return 0
        if args[:1] == ["--version"]:
            sys.stdout.write(f"memsight {profiler.__version__}\n")
            return 0
        if args and args[0].startswith("-"):
            raise UsageError(f"unknown option {args[0]} (see `memsight --help`)")
        if len(args) > 1:
            raise UsageError(f"unknown command {args[0]!r} (see `memsight --help`)")
        from memsight.profiler.commands.gui import cmd_gui

        return cmd_gui(args)
    except UsageError as exc:
        # Usage errors quote the command line: a file name may hold any character.
        sys.stderr.write(f"memsight: error: {terminal_safe(str(exc))}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except MemoryError:
        # A profile's reader bounds what a file can cost (profile/storage.py), but what is left
        # of the machine's memory is not the file's doing: one line, not a traceback.
        command = args[0] if args and not args[0].startswith("-") else "memsight"
        sys.stderr.write(f"memsight: error: {command}: out of memory\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
