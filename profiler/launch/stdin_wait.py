"""Whether a process waits for a line on its stdin, read from outside it.

A script run from the app has no terminal: its `input('name? ')` prompt is a line in the
console like any other, and nothing would show that the run is blocked on the user. Linux
tells, without touching the process: /proc/PID/task/TID/syscall gives, for a thread asleep in
a system call, the call's number and arguments, so a thread blocked in read(0, …) is a
thread waiting for stdin. The kernel answers "running" for a thread on a CPU and never stops
one to answer. Elsewhere (or where /proc is not readable) the answer is False: no prompt is
shown, which is what the app did before it could tell.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

STDIN_FD = 0

# The system calls that read a file descriptor given as their first argument, by machine
# (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h); select and
# poll are left out: a program polling its stdin among other descriptors is not waiting for
# the user alone.
READ_CALLS: dict[str, frozenset[int]] = {
    "x86_64": frozenset({0, 17, 19, 295}),  # read, pread64, readv, preadv
    "aarch64": frozenset({63, 65, 67, 69}),  # read, readv, pread64, preadv
    "riscv64": frozenset({63, 65, 67, 69}),  # the generic table, as aarch64
}


def _read_calls() -> frozenset[int]:
    return READ_CALLS.get(platform.machine(), frozenset())


def reads_descriptor(syscall_line: str, fd: int = STDIN_FD) -> bool:
    """Whether one /proc/.../syscall line is a read of `fd`: "0 0x0 0x7f… …" is read(0, …);
    "running", "-1 …" (asleep outside a system call) and other calls are not."""
    fields = syscall_line.split()
    if len(fields) < 2 or not fields[0].isdigit():
        return False
    try:
        first_argument = int(fields[1], 16)
    except ValueError:
        return False
    return int(fields[0]) in _read_calls() and first_argument == fd


def waits_for_stdin(pid: int, proc: Path = Path("/proc")) -> bool:
    """True when one of the process's threads is blocked reading its stdin."""
    if not _read_calls():
        return False
    try:
        threads = os.listdir(proc / str(pid) / "task")
    except OSError:
        return False
    for tid in threads:
        try:
            line = (proc / str(pid) / "task" / tid / "syscall").read_text()
        except OSError:  # the thread ended, or the process is not ours to read
            continue
        if reads_descriptor(line):
            return True
    return False
