"""`memsight run [options] SCRIPT [ARGS...]`: record a run headless, exactly as `python
SCRIPT ARGS...` would run it (argv, working directory, stdin, environment, signals, exit
status), then say where the profile is and what was found, or judge it by the CI gates
(run_gates.py)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from memsight.profiler.command_line import ArgumentParser, UsageError
from memsight.profiler.commands.run_gates import check_options, read_check_baseline, run_check
from memsight.profiler.gates import FAIL_ON, GATE_FAILED
from memsight.profiler.launch.launchers import python_program_on_path
from memsight.profiler.launch.preflight import (
    MAX_CENSUS_EVERY,
    MAX_INTERVAL_MS,
    MIN_INTERVAL_MS,
    InvalidSetting,
    Problem,
    Setting,
    anatomy_from_text,
    census_from_text,
    check_run,
    interval_from_text,
    ram_budget_from_text,
)
from memsight.profiler.launch.runtime import default_python
from memsight.profiler.launch.spec import (
    DEFAULT_CUDA_HISTORY,
    DEFAULT_INTERVAL_MS,
    RunSpec,
    default_profile_name,
)
from memsight.profiler.output_path import unused_path
from memsight.profiler.terminal_text import terminal_safe
from memsight.profiler.typed_values import MAX_PERCENT, integer_between
from memsight.profiler.units import format_bytes, format_duration

if TYPE_CHECKING:
    from memsight.profiler.recorder.session import Recording
    from memsight.profiler.remote.server import StreamServer

# Entries of the allocator's history: 100 times the default, already gigabytes of stacks.
MAX_CUDA_HISTORY = 10_000_000

_RUN_VALUE_OPTIONS = {
    "-o", "--out", "--interval-ms", "--python", "--ram-budget", "--census", "--anatomy",
    "--fail-on", "--max-peak-ram", "--max-peak-gpu", "--baseline", "--max-growth", "--serve",
}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="memsight run",
        usage="memsight run [options] SCRIPT [ARGS...]\n       memsight run [options] -m MODULE [ARGS...]",
        description=(
            "Run a Python script under memsight and record its memory to a profile file. "
            "Everything after SCRIPT (or -m MODULE) is passed to the target unchanged. "
            "SCRIPT may also name a Python program on PATH, such as torchrun or accelerate: "
            "it runs as the shell would run it, with the interpreter its first line names. "
            "Every Python process the target starts (torchrun's ranks, mp.spawn's processes, "
            "subprocesses) is recorded too, each on its own, in the same profile."
        ),
        epilog=(
            "exit status: the target's own exit code; if it died of signal N, memsight ends by "
            "the same signal (a shell shows 128+N). "
            "Ctrl+C reaches the target as under plain python; press it twice to stop the "
            "target, three times to kill its whole process tree. The profile is valid either way."
        ),
    )
    parser.add_argument(
        "-o",
        "--out",
        metavar="PATH",
        help="profile file to write (default: SCRIPT-YYYYMMDD-HHMMSS.memsight in the working directory)",
    )
    parser.add_argument(
        "--interval-ms",
        metavar="N",
        help=f"sampling interval in milliseconds, from {MIN_INTERVAL_MS:g} to "
        f"{MAX_INTERVAL_MS:g} (default {DEFAULT_INTERVAL_MS:g})",
    )
    parser.add_argument(
        "--python",
        metavar="PATH",
        help="interpreter that runs the target (default: the one running memsight)",
    )
    parser.add_argument(
        "--ram-budget",
        metavar="SIZE",
        help="RAM the run is meant to fit in, e.g. 6GiB; the report warns when the process "
        "tree's peak comes within 10%% of it (default: the machine's RAM or cgroup limit)",
    )
    parser.add_argument(
        "--no-hooks",
        action="store_true",
        help="record memory only: install no PyTorch hooks in the target (and take no censuses)",
    )
    parser.add_argument(
        "--census",
        metavar="WHEN",
        default="auto",
        help="censuses of live tensors and what holds them, taken between iterations: auto "
        "(after 5 iterations, then at 10, 20, 40, ..., within 0.5%% of the run's time), never, "
        f"or every-N (every N iterations, N up to {MAX_CENSUS_EVERY:,}) (default: auto)",
    )
    parser.add_argument(
        "--anatomy",
        metavar="WHEN",
        default="auto",
        help="what each module's forward saves for backward, and its parameters, gradients "
        "and optimizer state, measured once: auto (the first training forward, read with its "
        "iteration), N (iteration N), or off (default: auto); see `memsight report --fit`",
    )
    parser.add_argument(
        "--cuda-history",
        nargs="?",
        const=str(DEFAULT_CUDA_HISTORY),
        metavar="N",
        help="once the script has initialised CUDA, have PyTorch's caching allocator record "
        "the Python stack of every allocation and its last N alloc/free events "
        f"(default N {DEFAULT_CUDA_HISTORY:,}, at most {MAX_CUDA_HISTORY:,}; write "
        "--cuda-history=N), and keep its "
        "snapshot at an out-of-memory error and at exit for `memsight export --memory-viz`. "
        "A script that records history itself keeps its own settings",
    )
    parser.add_argument(
        "--serve",
        metavar="[HOST:]PORT",
        help="also serve the live recording to viewers (`memsight connect`, File > Connect in "
        "the app), on 127.0.0.1 unless HOST is given; PORT 0 picks a free port. memsight prints "
        "`memsight: serving on HOST:PORT (token TOKEN)` to stderr at the start (with -q too); "
        "from another machine, use `ssh -L PORT:127.0.0.1:PORT` to reach it",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing of memsight's own"
    )
    gate = parser.add_argument_group(
        "memory gates for CI (any of these implies --check)",
        f"After the run, print the report and exit with status {GATE_FAILED} and one line "
        "`memsight: check failed: ...` per gate that failed (the script's own failure keeps "
        "its own exit status).",
    )
    gate.add_argument(
        "--check", action="store_true", help="print the report and fail on findings (--fail-on)"
    )
    gate.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        help="the least severe finding that fails the check (default: warning)",
    )
    gate.add_argument(
        "--max-peak-ram",
        metavar="SIZE",
        help="fail when the process tree's peak RAM is above SIZE, e.g. 2GiB",
    )
    gate.add_argument(
        "--max-peak-gpu",
        metavar="SIZE",
        help="fail when PyTorch's allocated GPU memory peaks above SIZE on any device",
    )
    gate.add_argument(
        "--baseline",
        metavar="OLD.memsight",
        help="a profile of an earlier run to compare the peaks with (see --max-growth)",
    )
    gate.add_argument(
        "--max-growth",
        metavar="PCT",
        help="with --baseline: fail when a peak grew more than PCT, e.g. 10%% (default 10%%; "
        f"up to {MAX_PERCENT:g}%%). The baseline is read before the script starts",
    )
    return parser


def _cuda_history(value: str | None) -> int:
    """--cuda-history's N: the allocator's trace entries; 0 when the option was not given."""
    if value is None:
        return 0
    try:
        return integer_between(value, 1, MAX_CUDA_HISTORY, "a number of entries", grouped=True)
    except ValueError as exc:
        raise UsageError(f"--cuda-history: {exc}") from None


def split_run_args(argv: Sequence[str]) -> tuple[list[str], str | None, bool, list[str]]:
    """Split `memsight run` arguments into (memsight options, target, is_module, target args).

    Options end at the first argument that is not one (the script), at `-m MODULE`, or at `--`.
    """
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            i += 1
            break
        if token == "-m":
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name")
            return list(argv[:i]), argv[i + 1], True, list(argv[i + 2 :])
        if token.startswith("-m") and len(token) > 2 and not token.startswith("--"):
            return list(argv[:i]), token[2:], True, list(argv[i + 1 :])
        if token.startswith("-") and token != "-":
            if token in _RUN_VALUE_OPTIONS:
                i += 1
            i += 1
            continue
        break
    options = list(argv[:i])
    if options and options[-1] == "--":
        options.pop()
    if i >= len(argv):
        return options, None, False, []
    return options, argv[i], False, list(argv[i + 1 :])


def _resolve_python(value: str | None) -> str:
    """An interpreter named as on a command line: a path, or a name looked up on PATH."""
    if value is None:
        return default_python()
    if os.sep in value:
        return os.path.abspath(value)
    found = shutil.which(value)
    return os.path.abspath(found) if found else value  # the check then says it does not exist


# The option that sets each setting a problem can name (preflight.Setting).
_OPTION_OF: dict[Setting, str] = {
    "python": "--python",
    "interval": "--interval-ms",
    "ram_budget": "--ram-budget",
    "census": "--census",
    "anatomy": "--anatomy",
}


def build_spec(
    options: argparse.Namespace, target: str, is_module: bool, args: list[str]
) -> RunSpec:
    """The run the command line asks for, checked by the same validator the app uses."""
    if not is_module and target == "-":
        raise UsageError("reading the script from standard input is not supported")
    try:
        budget = (
            ram_budget_from_text(options.ram_budget, required=True)
            if options.ram_budget is not None
            else None
        )
        census = census_from_text(options.census)
        anatomy = anatomy_from_text(options.anatomy)
        interval_ms = (
            DEFAULT_INTERVAL_MS
            if options.interval_ms is None
            else interval_from_text(options.interval_ms)
        )
    except InvalidSetting as exc:
        raise UsageError(_problem_text(exc.problem)) from None
    cuda_history = _cuda_history(options.cuda_history)
    python = _resolve_python(options.python)
    program = None if is_module else python_program_on_path(target)
    if program is not None:  # `torchrun ...`: the launcher on PATH, run as the shell runs it
        target = program.path
        python = python if options.python is not None else program.interpreter
    spec = RunSpec(
        target=target,
        args=tuple(args),
        module=is_module,
        cwd=os.getcwd(),
        python=python,
        interval_ms=interval_ms,
        hooks=not options.no_hooks,
        ram_budget_bytes=budget,
        census=census,
        anatomy=anatomy,
        cuda_history=cuda_history,
    )
    problems = check_run(spec)
    blocking = [p for p in problems if p.blocking]
    if blocking:
        raise UsageError(_problem_text(blocking[0]))
    for problem in problems:
        if not options.quiet:
            sys.stderr.write(f"memsight: warning: {_problem_text(problem)}\n")
    return spec


def _problem_text(problem: Problem) -> str:
    option = _OPTION_OF.get(problem.setting)
    return f"{option}: {problem.message}" if option else problem.message


def _out_path(spec: RunSpec, out: str | None) -> Path:
    if out is not None:
        from memsight.profiler.output_path import OutputError, output_target

        try:
            target = output_target(out)
        except OutputError as exc:
            raise UsageError(f"--out: {exc.problem}") from None
        if target.stdout:  # the target's own output goes there
            raise UsageError("--out: - is the target's standard output; name a file")
        return Path(out)
    return unused_path(Path(default_profile_name(spec)))


def _in_terminal_foreground() -> bool:
    """True when a terminal's Ctrl+C reaches our process group (and so the target's too)."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


_TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
# Passed on as they come; SIGINT, SIGTERM and SIGHUP are interrupts (see cmd_run).
_FORWARDED_SIGNALS = (
    signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGVTALRM,
    signal.SIGPROF, signal.SIGPWR, signal.SIGURG,
)  # fmt: skip


def cmd_run(argv: Sequence[str], end_like_target: bool = False) -> int:
    """Record one run. `end_like_target`: as the program itself (not called from code), die
    by the signal that killed the target instead of returning 128+N."""
    from memsight.profiler.recorder.session import Recording

    option_args, target, is_module, target_args = split_run_args(argv)
    options = build_parser().parse_args(option_args)
    if target is None:
        raise UsageError("a SCRIPT (or -m MODULE) to run is required")
    check = check_options(options)
    spec = build_spec(options, target, is_module, target_args)
    out = _out_path(spec, options.out)
    baseline = read_check_baseline(check)
    server = _stream_server(options.serve, out)
    # Outside a terminal's foreground no Ctrl+C comes, but a signal sent to our process group
    # (`kill -INT -PGID`, a job runner stopping its job) would reach a target in the group
    # directly and again through us: there the target gets a group of its own, and every
    # signal comes to it once, passed on by memsight.
    recording = Recording(
        spec, out, stdio="terminal", new_group=not _in_terminal_foreground(), subreaper=True
    )

    interrupts = 0

    def escalate() -> None:
        """The second interrupt stops the target, the third kills its whole tree."""
        if interrupts == 2:
            _say(options, "stopping the target (interrupt again to kill it)", recording)
            recording.send_signal(signal.SIGTERM)
        elif interrupts > 2:
            _say(options, "killing the target's process tree", recording)
            recording.kill_tree()

    def on_interrupt(signum: int, _frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        # The first one is passed on, unless it is a terminal's Ctrl+C, which reached a target
        # in our process group already.
        if interrupts == 1 and not _reached_target(signum):
            recording.send_signal(signum)
        escalate()

    def _reached_target(signum: int) -> bool:
        # A terminal's Ctrl+C or Ctrl+\ (and its hangup) went to the whole foreground process
        # group: a target in ours has it already, and must not get it twice.
        return (
            signum in _TERMINAL_SIGNALS
            and recording.shares_process_group
            and _in_terminal_foreground()
        )

    def on_forwarded(signum: int, _frame: FrameType | None) -> None:
        # Every other catchable signal reaches the target as it would reach plain python.
        if not _reached_target(signum):
            recording.send_signal(signum)

    def on_interrupt_key() -> None:
        # Ctrl+C typed into the target's pseudo-terminal: the pty itself delivered SIGINT.
        nonlocal interrupts
        interrupts += 1
        escalate()

    recording.on_interrupt_key = on_interrupt_key
    previous = {
        sig: signal.signal(sig, on_interrupt)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    for sig in _FORWARDED_SIGNALS:
        previous[sig] = signal.signal(sig, on_forwarded)
    previous[signal.SIGWINCH] = signal.signal(
        signal.SIGWINCH, lambda _s, _f: recording.sync_terminal_size()
    )
    try:
        try:
            recording.start()
        except OSError as exc:
            if server is not None:
                server.close()
            raise UsageError(f"cannot start {spec.python}: {exc.strerror or exc}") from None
        if server is not None:
            writer = recording.writer
            assert writer is not None
            server.start(out, lambda: writer.bytes_written)
            recording.after_flush = server.notify
            # Said even with -q: a viewer cannot connect without it.
            _say_always(f"serving on {server.address} (token {server.token})", recording)
        status = recording.wait()
    finally:
        recording.restore_terminal()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.end()  # the viewers connected get the rest, the end and the exit status
    if not options.quiet and check is None:
        report_saved(out)
    failures = run_check(out, check, baseline, options.quiet) if check is not None else []
    for failure in failures:
        sys.stderr.write(f"memsight: check failed: {terminal_safe(failure)}\n")
    if check is not None and not failures and not options.quiet:
        sys.stderr.write("memsight: check passed\n")
    if status.signal is not None and end_like_target:
        _die_by(status.signal)
    if failures and status.shell_code == 0:
        return GATE_FAILED  # the script ran to its end: the memory gate failed
    return status.shell_code


# Signals whose default action dumps core: memsight's own core would only mislead.
_CORE_SIGNALS = {
    signal.SIGQUIT, signal.SIGILL, signal.SIGTRAP, signal.SIGABRT,
    signal.SIGBUS, signal.SIGFPE, signal.SIGSEGV, signal.SIGSYS, signal.SIGXCPU, signal.SIGXFSZ,
}  # fmt: skip


def _die_by(signum: int) -> None:
    """End memsight by the signal that ended the target, as plain python would have ended.

    A shell sees 128+N either way, but a parent process sees "killed by signal N" (returncode
    -N), and a shell script's loop stops on a Ctrl+C death as it does for plain python. Returns
    only if the signal cannot end this process (then the caller exits with 128+N).
    """
    import resource

    sys.stdout.flush()
    sys.stderr.flush()
    if signum in _CORE_SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            _, hard = resource.getrlimit(resource.RLIMIT_CORE)
            resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)


def _say(options: argparse.Namespace, message: str, recording: Recording | None = None) -> None:
    if not options.quiet:
        _say_always(message, recording)


def _say_always(message: str, recording: Recording | None = None) -> None:
    # While the terminal is in raw mode for the target, a line end needs its "\r".
    raw = (
        recording is not None and recording.terminal is not None and recording.terminal.relays_input
    )
    message = terminal_safe(message)
    sys.stderr.write(f"memsight: {message}\r\n" if raw else f"memsight: {message}\n")
    sys.stderr.flush()


def _stream_server(serve: str | None, out: Path) -> StreamServer | None:
    """The server of `--serve [HOST:]PORT`, listening already; None without the option."""
    if serve is None:
        return None
    from memsight.profiler.output_path import output_target
    from memsight.profiler.remote.server import StreamServer
    from memsight.profiler.remote.wire import parse_address

    try:
        host, port = parse_address(serve)
    except ValueError as exc:
        raise UsageError(f"--serve: {exc}") from None
    if not output_target(str(out)).replace:  # a FIFO or a device: nothing to read back
        raise UsageError("--serve: the profile must be written to a file, which viewers are sent")
    try:
        return StreamServer(host, port)
    except OSError as exc:
        raise UsageError(f"--serve: cannot listen on {serve}: {exc.strerror or exc}") from None


def report_saved(path: Path) -> None:
    """What `memsight run` says of the profile it saved (and `connect` of its copy)."""
    # Imported here: with -q nothing is said, and `memsight run` starts without them.
    from memsight.profiler.profile.storage import ProfileError, load_profile
    from memsight.profiler.profile.summary import sampling_behind_text, sampling_pace, summarize

    if not path.is_file():  # a device or a FIFO was written into: there is nothing to read back
        sys.stderr.write(f"memsight: wrote the profile into {terminal_safe(str(path))}\n")
        return
    try:
        profile = load_profile(path)
    except ProfileError as exc:
        sys.stderr.write(
            f"memsight: the profile could not be read back: {terminal_safe(str(exc))}\n"
        )
        return
    s = summarize(profile)
    peak = f", peak RAM {format_bytes(s.ram.bytes)}" if s.ram else ""
    if s.gpu_allocated:
        peak += f", peak GPU allocated {format_bytes(s.gpu_allocated.bytes)}"
    from memsight.profiler.diagnosis import diagnose

    findings = diagnose(profile).findings
    found = (
        "no problems found"
        if not findings
        else "found: " + ", ".join(f"{f.rule} ({f.severity})" for f in findings)
    )
    shown = terminal_safe(str(path))
    behind = sampling_behind_text(sampling_pace(profile))
    sys.stderr.write(
        f"memsight: saved {shown} ({s.samples:,} samples over {format_duration(s.duration_s)}{peak})\n"
        + (f"memsight: sampling: {behind}\n" if behind is not None else "")
        + f"memsight: {found}\n"
        f"memsight: see it with `memsight report {shown}` or `memsight {shown}`\n"
    )
