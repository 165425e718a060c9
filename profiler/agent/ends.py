"""How the processes a program starts end, as only the program itself sees it.

Two facts about a child never reach the recorder from outside:

- Its exit status, once its parent has collected it: the kernel hands the status to the one
  `wait` call that reaps the child and then forgets it. `os.waitpid`, `os.wait`, `os.wait3`,
  `os.wait4` and `os.waitid` are wrapped so that every child they return is reported as a
  `child_reaped` event (pid, exit code or signal). multiprocessing (`Process.join`,
  `is_alive`, `exitcode`) and subprocess (`wait`, `communicate`, `run`) collect their children
  through these calls. The wrappers pass the same arguments to the same functions and return
  or raise exactly what those do.
- An exception that ends a `multiprocessing.Process`: its `_bootstrap` catches it, prints it
  with `traceback.print_exc()` and exits with status 1, so it never reaches the interpreter's
  top level, where the agent sees uncaught exceptions. `traceback.print_exc` is wrapped to
  report the exception it prints when, and only when, its caller is that `_bootstrap`.

Standard library only; Python 3.9+.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Any, Callable, Optional, Tuple

# Names of the os functions that reap a child, and how to find (pid, status) in their result.
WAIT_FUNCTIONS = ("waitpid", "wait", "wait3", "wait4")
_BOOTSTRAP_FILE = os.path.join("multiprocessing", "process.py")

ReportStatus = Callable[[int, Optional[int], Optional[int]], None]  # pid, exit code, signal
ReportException = Callable[[BaseException], None]


def decode_status(status: int) -> Optional[Tuple[Optional[int], Optional[int]]]:
    """(exit code, signal) of a wait status that says the child ended, else None (a stopped
    or continued child: WUNTRACED, WCONTINUED)."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return None


def watch_reaped_children(report: ReportStatus) -> None:
    """Wrap the os functions that reap children so that each reaped child is reported."""
    for name in WAIT_FUNCTIONS:
        original = getattr(os, name, None)
        if original is not None and not getattr(original, "_memsight_observer", False):
            setattr(os, name, _observe_wait(original, report))
    waitid = getattr(os, "waitid", None)
    if waitid is not None and not getattr(waitid, "_memsight_observer", False):
        os.waitid = _observe_waitid(waitid, report)


def _observe_wait(original: Callable[..., Any], report: ReportStatus) -> Callable[..., Any]:
    def wait(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        with contextlib.suppress(Exception):  # an observer never disturbs the call
            pid, status = result[0], result[1]
            ended = decode_status(status) if pid > 0 else None
            if ended is not None:
                report(pid, ended[0], ended[1])
        return result

    return _like(wait, original)


def _observe_waitid(original: Callable[..., Any], report: ReportStatus) -> Callable[..., Any]:
    ended_codes = {
        getattr(os, name)
        for name in ("CLD_EXITED", "CLD_KILLED", "CLD_DUMPED")
        if hasattr(os, name)
    }
    exited = getattr(os, "CLD_EXITED", None)

    def waitid(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        with contextlib.suppress(Exception):
            if result is not None and result.si_pid > 0 and result.si_code in ended_codes:
                if result.si_code == exited:
                    report(result.si_pid, result.si_status, None)
                else:
                    report(result.si_pid, None, result.si_status)
        return result

    return _like(waitid, original)


def _like(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    wrapper.__name__ = getattr(original, "__name__", wrapper.__name__)
    wrapper.__qualname__ = getattr(original, "__qualname__", wrapper.__qualname__)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    wrapper._memsight_observer = True  # type: ignore[attr-defined]
    return wrapper


def watch_process_exceptions(report: ReportException) -> None:
    """Report the exception that ends a multiprocessing.Process (printed by its _bootstrap)."""
    original = traceback.print_exc
    if getattr(original, "_memsight_observer", False):
        return

    def print_exc(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            caller = sys._getframe(1).f_code
            if caller.co_name == "_bootstrap" and caller.co_filename.endswith(_BOOTSTRAP_FILE):
                exc = sys.exc_info()[1]
                if exc is not None:
                    report(exc)
        return original(*args, **kwargs)

    traceback.print_exc = _like(print_exc, original)
