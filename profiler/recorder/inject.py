"""Make a running Python process start memsight's agent (`memsight attach`).

The target's main thread must run the agent's loader with the interpreter's lock held, at a
point where running Python code is safe. Two ways in:

- Python 3.14+: `sys.remote_exec(pid, file)` (PEP 768), run by the target's own interpreter.
- Older Pythons: gdb. It stops the process for a moment, maps one page of memory into it
  (mmap: no lock of the target's is taken), writes a one-line Python statement there and
  queues it with `Py_AddPendingCall(PyRun_SimpleString, page)`: the interpreter runs pending
  calls in the main thread, between two bytecodes, as it runs signal handlers. Then gdb
  detaches. The statement runs the loader in a namespace of its own and swallows every error
  (a pending call that failed would raise a SystemError in the program).

In both, the loader runs when the main thread next runs Python code: at once for a training
loop; for a program blocked in a long C call, when that returns. What the loader raised is
written to a file the attacher reads (`failure()`). The page (4 KiB) stays mapped.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import memsight.profiler

if TYPE_CHECKING:
    from memsight.profiler.recorder.session import Recording

AGENT_ROOT = Path(memsight.profiler.__file__).resolve().parent  # the package the agent is
AGENT_WAIT_S = 15.0  # how long start_agent waits for the agent's hello before saying so
GDB_TIMEOUT_S = 60.0
REMOTE_EXEC_TIMEOUT_S = 30.0
PAGE = 4096

_LOADER = """\
def _memsight_attach(root, config, failed):
    import importlib.util
    import sys

    name = "_memsight_profiler"
    try:
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                name, root + "/__init__.py", submodule_search_locations=[root]
            )
            package = importlib.util.module_from_spec(spec)
            sys.modules[name] = package
            spec.loader.exec_module(package)
        __import__(name + ".agent.attach", fromlist=["attach"]).attach(config)
    except BaseException as exc:
        try:
            with open(failed, "w") as out:
                out.write("%s: %s" % (type(exc).__name__, exc))
        except BaseException:
            pass


_memsight_attach({root!r}, {config!r}, {failed!r})
"""


class InjectError(Exception):
    """The agent cannot be started in the process; one line says why."""


class NoWayIn(InjectError):
    """This Python or platform offers no way in: record from outside only."""


class NotPermitted(InjectError):
    """The kernel refuses to let memsight look inside the process (ptrace)."""


class Exited(InjectError):
    """The process ended while memsight was getting in."""


@dataclass
class Loader:
    """The loader file written for one attach, and where it reports a failure."""

    folder: Path
    path: Path
    failed: Path

    def failure(self) -> str | None:
        try:
            return self.failed.read_text(errors="replace").strip() or None
        except OSError:
            return None

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def write_loader(config: dict[str, Any]) -> Loader:
    """The loader for `config` (Recording.agent_config), in a new folder the target can read."""
    folder = Path(tempfile.mkdtemp(prefix="memsight-attach-"))
    folder.chmod(0o755)  # the target may run as another user memsight may attach to (root)
    path, failed = folder / "loader.py", folder / "failed.txt"
    path.write_text(
        _LOADER.format(root=str(AGENT_ROOT), config=json.dumps(config), failed=str(failed))
    )
    path.chmod(0o644)
    return Loader(folder, path, failed)


def start_agent(
    recording: Recording, pid: int, say: Callable[[str], None], warn: Callable[[str], None]
) -> Loader:
    """Start the agent in `pid`, which `recording` is attached to, and wait (AGENT_WAIT_S) for
    it to connect; `say` how it went, `warn` of what the recording will lack. The loader is
    returned for removal once the recording ends. Raises NotPermitted (the caller gives up:
    the user must allow it, or ask for no agent) and Exited; any other failure is a warning,
    and the recording goes on from outside."""
    loader = write_loader(recording.agent_config())
    try:
        way = inject(pid, loader, python_version(pid))
    except NotPermitted:
        loader.remove()
        raise
    except InjectError as exc:
        if not recording.target.poll():
            loader.remove()
            raise Exited(f"pid {pid} exited during the attach") from None
        warn(f"cannot start the agent in pid {pid}: {exc}; recording from outside only")
        recording.watch_gpus_from_outside()
        return loader
    assert recording.server is not None
    # Until the agent says hello, its loader reports a failure, or the time is up.
    deadline = time.monotonic() + AGENT_WAIT_S
    connected = recording.server.connected
    while not connected.wait(0.05) and not loader.failure() and time.monotonic() < deadline:
        if not recording.target.poll():
            break
    if connected.is_set():
        say(f"the agent is running in pid {pid} (started through {way})")
    elif loader.failure():
        warn(f"the agent failed in pid {pid}: {loader.failure()}; recording from outside only")
        recording.watch_gpus_from_outside()
    elif recording.target.poll():
        warn(
            f"pid {pid} has not run Python code in its main thread for {AGENT_WAIT_S:g} s (a "
            "long call in C, or a wait); its agent starts when it does"
        )
    return loader


def statement(loader: Path) -> str:
    """The one statement the target runs: the loader, in a namespace of its own, and never
    an error out of it (nothing is bound in the program's __main__)."""
    return (
        "try:\n"
        f" exec(compile(open({str(loader)!r}).read(), {str(loader)!r}, 'exec'),"
        " {'__name__': '_memsight_attach'})\n"
        "except BaseException:\n"
        " pass\n"
    )


def python_version(pid: int) -> tuple[int, int] | None:
    """The target's Python version, asked of its own interpreter; None if it is not one."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        done = subprocess.run(
            [exe, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.fullmatch(r"(\d+)\.(\d+)\s*", done.stdout)
    return (int(match[1]), int(match[2])) if match and done.returncode == 0 else None


def inject(pid: int, loader: Loader, version: tuple[int, int] | None) -> str:
    """Queue the loader in `pid`; the way used ("sys.remote_exec" or "gdb"). Raises
    NotPermitted, NoWayIn or InjectError."""
    if version is not None and version >= (3, 14):
        return _remote_exec(pid, loader)
    gdb = shutil.which("gdb")
    if gdb is None:
        shown = f"Python {version[0]}.{version[1]}" if version else "this Python"
        raise NoWayIn(
            f"{shown} has no sys.remote_exec (3.14+) and gdb is not installed: "
            "`apt install gdb` (or your system's package) lets memsight in"
        )
    return _gdb(gdb, pid, loader)


def _remote_exec(pid: int, loader: Loader) -> str:
    exe = os.readlink(f"/proc/{pid}/exe")
    try:
        done = subprocess.run(
            [exe, "-I", "-c", f"import sys; sys.remote_exec({pid}, {str(loader.path)!r})"],
            capture_output=True,
            text=True,
            timeout=REMOTE_EXEC_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise InjectError(f"sys.remote_exec could not run: {exc}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["failed"])[-1]
        if "ermission" in why or "not permitted" in why:
            raise NotPermitted(why)
        if "disabled" in why:  # PYTHON_DISABLE_REMOTE_DEBUG, -X disable_remote_debug
            raise NoWayIn(f"remote debugging is disabled in the process: {why}")
        raise InjectError(f"sys.remote_exec: {why}")
    return "sys.remote_exec"


def gdb_commands(statement_text: str) -> str:
    """The gdb script: map a page, write the statement into it, queue it, detach."""
    data = statement_text.encode() + b"\0"
    if len(data) > PAGE:
        raise InjectError("the loader's path is too long")
    lines = [
        "set confirm off",
        "set pagination off",
        "sharedlibrary libc",
        "sharedlibrary libpython",
        # PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS: a syscall, no lock of the target's.
        f"set $memsight_page = (char *) mmap((void *) 0, (unsigned long) {PAGE}, 3, 0x22, -1, 0L)",
        'printf "memsight-page %lu\\n", (unsigned long) $memsight_page',
    ]
    lines += [f"set *(char *) ($memsight_page + {i}) = {byte}" for i, byte in enumerate(data)]
    lines += [
        "set $memsight_queued = (int) Py_AddPendingCall((void *) PyRun_SimpleString,"
        " $memsight_page)",
        'printf "memsight-queued %d\\n", $memsight_queued',
        "detach",
        "quit",
    ]
    return "\n".join(lines) + "\n"


@functools.cache
def gdb_call_problem(gdb: str) -> str | None:
    """Why `gdb` cannot call a function in a process on this machine, or None when it can.

    Found on a throwaway process of memsight's own (`sleep`), never on the target: a gdb whose
    function call fails midway leaves the stopped thread's registers half written, and a
    program stopped in a system call then gets an error it never had (gdb 13.1 on Linux 6.18
    fails to write the CPU's extended register state, "Couldn't write extended state status",
    and a sleeping Python program raised OSError 514).
    """
    sleep = shutil.which("sleep")
    if sleep is None:
        return None  # nothing to try it on: the target's own attempt will say what fails
    probe = subprocess.Popen(
        [sleep, "60"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    call_getpid = [
        "-ex", "sharedlibrary libc",
        "-ex", 'printf "memsight-probe %d\\n", ((int (*)(void)) getpid)()',
    ]  # fmt: skip
    try:
        done = subprocess.run(
            _gdb_command(gdb, probe.pid, *call_getpid),
            capture_output=True,
            text=True,
            timeout=GDB_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        probe.kill()
        probe.wait()
    output = done.stdout + done.stderr
    if f"memsight-probe {probe.pid}" in output or "ptrace: Operation not permitted" in output:
        return None  # it works, or ptrace is refused: the target's attempt says so as ever
    failed = [
        line.strip()
        for line in output.splitlines()
        if line.strip() and not line.startswith(("[Inferior", "warning:", "Detaching"))
    ]
    return failed[-1] if failed else f"gdb exited with status {done.returncode}"


def _gdb_command(gdb: str, pid: int, *script: str) -> list[str]:
    """gdb, quiet and without the user's settings, attached to `pid` to run `script`: shared
    libraries and debug info are loaded only as asked, so attaching takes no time at all."""
    return [
        gdb, "-batch", "-nx", "-nw", "-p", str(pid),
        "-iex", "set auto-solib-add off",
        "-iex", "set debuginfod enabled off",
        *script,
    ]  # fmt: skip


def _gdb(gdb: str, pid: int, loader: Loader) -> str:
    problem = gdb_call_problem(gdb)
    if problem is not None:
        raise NoWayIn(
            f"gdb cannot call functions in a process on this machine ({problem}), so memsight "
            "leaves the process untouched"
        )
    script = loader.folder / "attach.gdb"
    script.write_text(gdb_commands(statement(loader.path)))
    try:
        done = subprocess.run(
            _gdb_command(gdb, pid, "-x", str(script)),
            capture_output=True,
            text=True,
            timeout=GDB_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise InjectError(f"gdb did not finish within {GDB_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise InjectError(f"gdb could not run: {exc.strerror or exc}") from None
    output = done.stdout + done.stderr
    if "ptrace: Operation not permitted" in output or "Could not attach" in output:
        raise NotPermitted(_ptrace_advice())
    if "No symbol" in output and "Py_AddPendingCall" in output:
        raise NoWayIn("the process has no Python interpreter symbols gdb can call")
    page = re.search(r"memsight-page (\d+)", output)
    if page is None or int(page[1]) in (0, 2**64 - 1):
        raise InjectError(f"gdb could not map memory in the process: {_last_line(output)}")
    queued = re.search(r"memsight-queued (-?\d+)", output)
    if queued is None or int(queued[1]) != 0:
        raise InjectError(f"the interpreter did not take the agent's loader: {_last_line(output)}")
    return "gdb"


def _ptrace_advice() -> str:
    scope = None
    with contextlib.suppress(OSError):
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    setting = f"kernel.yama.ptrace_scope is {scope}: " if scope is not None else ""
    return (
        f"the kernel does not let memsight look inside the process ({setting}"
        "`sudo sysctl kernel.yama.ptrace_scope=0` allows it for your own processes; in a "
        "container, run it with `--cap-add SYS_PTRACE`)"
    )


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
