"""The `memsight` commands, one module each; profiler/cli.py only dispatches to them.

run.py (with run_gates.py, its CI gates), report.py, export.py, compare.py, merge.py, and
gui.py (no command: the desktop app). Each module holds its command's parser and its
`cmd_*(argv) -> int`, which returns the exit status (docs/architecture.md, "Exit statuses")
and raises profiler.command_line.UsageError for a usage error (status 2). What a command
computes lives in the core it calls (diagnosis, comparison, gates, profile.merge, report);
a command only reads its options, calls it and writes the result.
"""
