"""A Python process that runs already, read as a run (`memsight attach`, File > Attach).

Only /proc is read: the interpreter, the command line and the working directory, and whether
it is Python at all (its program's name, or libpython among its mappings).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from memsight.profiler.launch.spec import RunSpec

_PYTHON_EXE = re.compile(r"python[0-9.]*[a-z]?$")


def is_python_program(path: str) -> bool:
    """Whether a program's path names a Python interpreter (python, python3.11, python3.13t)."""
    return bool(_PYTHON_EXE.search(os.path.basename(path)))


class NotAttachable(Exception):
    """One line: why this process cannot be attached to."""


def python_process(pid: int) -> tuple[str, list[str], str]:
    """(interpreter, argv, working directory) of a running Python process; NotAttachable with
    the reason when there is no such process, it is not Python, or it cannot be read."""
    proc = Path(f"/proc/{pid}")
    if not proc.is_dir():
        raise NotAttachable(f"no process with pid {pid}")
    try:
        exe = os.readlink(proc / "exe")
        argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
        cwd = os.readlink(proc / "cwd")
        maps = (proc / "maps").read_text(errors="replace")
    except FileNotFoundError:
        if proc.is_dir():  # there, but without a program: a kernel thread, or a zombie
            raise NotAttachable(
                f"pid {pid} is not a Python process (a kernel thread, or one that has exited)"
            ) from None
        raise NotAttachable(f"pid {pid} exited during the attach") from None
    except PermissionError:
        raise NotAttachable(_denied(pid, proc)) from None
    except OSError as exc:
        raise NotAttachable(f"cannot read pid {pid}: {exc.strerror or exc}") from None
    argv = argv[:-1] if argv and argv[-1] == "" else argv
    if not (is_python_program(exe) or "libpython" in maps):
        raise NotAttachable(f"pid {pid} ({os.path.basename(exe)}) is not a Python process")
    return exe, argv, cwd


def _denied(pid: int, proc: Path) -> str:
    """Why the process' /proc entries cannot be read: another user's, or protected."""
    try:
        owner = proc.stat().st_uid
    except OSError:
        owner = None
    if owner is not None and owner != os.geteuid() and os.geteuid() != 0:
        return f"pid {pid} is another user's process: memsight attaches as its owner (or root)"
    return f"cannot read pid {pid}'s process: permission denied (a protected process)"


def attached_spec(
    exe: str, argv: list[str], cwd: str, interval_ms: float, hooks: bool, census: str
) -> RunSpec:
    """The attached process as a run: its script (or -m module) and arguments."""
    target, args, module = (argv[0] if argv else exe), argv[1:], False
    rest = argv[1:]
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-"):
        rest = rest[1:]  # interpreter options (-u, -X dev, ...) before the script
    if rest[:1] == ["-m"] and len(rest) > 1:
        target, args, module = rest[1], rest[2:], True
    elif rest and rest[0] not in ("-c", "-"):
        target, args = rest[0], rest[1:]
    return RunSpec(
        target=target,
        args=tuple(args),
        module=module,
        cwd=cwd,
        python=exe,
        interval_ms=interval_ms,
        hooks=hooks,
        census=census,
    )
