"""Tie a process's life to its parent's: PR_SET_PDEATHSIG (Linux; a no-op elsewhere).

The target of a recording must not outlive its recorder: a `kill -9` of memsight would leave
it running with nothing recording it. The kernel sends the death signal when the parent
*thread* that forked the child exits, so the target is started from the recorder's main
thread, which lives as long as the recorder does.
"""

from __future__ import annotations

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
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def _die_with(prctl: Any, parent_pid: int, signum: int) -> None:
    if prctl is None or prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        return
    # The parent may have died before prctl took effect: this process is then already
    # reparented and the kernel will never send the signal, so it is sent here and now.
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Have the kernel send `signum` to this process when its parent dies."""
    _die_with(_load_prctl(), os.getppid(), signum)


def child_preexec(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A preexec_fn for Popen: the child dies (SIGKILL) with this process, then runs `then`."""
    prctl = _load_prctl()
    parent_pid = os.getpid()

    def preexec() -> None:
        _die_with(prctl, parent_pid, signal.SIGKILL)
        if then is not None:
            then()

    return preexec
