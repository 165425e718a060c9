"""Tie a process's life to its parent's: PR_SET_PDEATHSIG (Linux; a no-op elsewhere).

The target of a recording must not outlive its recorder: a `kill -9` of memsight would leave
it running with nothing recording it. The kernel sends the death signal when the parent
*thread* that forked the child exits, so the target is started from the recorder's main
thread, which lives as long as the recorder does.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Any:
    """libc's prctl, or None. Loaded in the parent: find_library() runs programs, which must
    not happen between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    # glibc's own name first: find_library("c") runs `ldconfig -p` (twice), milliseconds on
    # every run's start; it is asked only where that name does not load (musl).
    for name in ("libc.so.6", None):
        try:
            libc = ctypes.CDLL(name or ctypes.util.find_library("c"), use_errno=True)
            return libc.prctl
        except (OSError, AttributeError, TypeError):
            continue
    return None


def _die_with(prctl: Any, parent_pid: int, signum: int) -> None:
    if prctl is None or prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        return
    # The parent may have died before prctl took effect: this process is then already
    # reparented and the kernel will never send the signal, so it is sent here and now.
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)


def die_with_parent(signum: int = signal.SIGKILL, parent_pid: int | None = None) -> None:
    """Have the kernel send `signum` to this process when its parent dies.

    parent_pid: the pid the parent had when it started this process (it says so in this
    process's arguments). Given, a parent that died before this call is caught too: this
    process then has another parent already, and `signum` comes at once."""
    _die_with(_load_prctl(), os.getppid() if parent_pid is None else parent_pid, signum)


def child_preexec(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A preexec_fn for Popen: the child dies (SIGKILL) with this process, then runs `then`."""
    prctl = _load_prctl()
    parent_pid = os.getpid()

    def preexec() -> None:
        _die_with(prctl, parent_pid, signal.SIGKILL)
        if then is not None:
            then()

    return preexec


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphans among this process's descendants (double-forked daemons, `cmd &` from a shell)
    are reparented to this process instead of init, so that they can be found and ended.
    A subreaper must reap them: see reap_orphans(). False where not supported."""
    prctl = _load_prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def reap_orphans(keep: set[int]) -> dict[int, int]:
    """Collect the exit status of dead children of this process, except those in `keep`
    (waited for by their own Popen), so that orphans reparented here do not stay zombies.
    Returns the wait status of each one collected, by pid."""
    me = str(os.getpid()).encode()
    reaped: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return reaped
    for entry in entries:
        if not entry.isdigit() or int(entry) in keep:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[0] == b"Z" and fields[1] == me:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(int(entry), os.WNOHANG)
                if pid > 0:
                    reaped[pid] = status
    return reaped
