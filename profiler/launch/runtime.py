"""Where memsight runs from: a Python environment, or a standalone (frozen) build.

In a standalone build `sys.executable` is memsight itself, not a Python: the target needs an
interpreter of the user's, the recording process is memsight started again with a flag, and
the agent is shipped as plain source files beside the build (packaging/memsight.spec puts
profiler/agent and the two modules it imports where this package's own files would be).
"""

from __future__ import annotations

import os
import shutil
import sys

FROZEN = bool(getattr(sys, "frozen", False))
RECORDER_HOST_FLAG = "--recorder-host"  # standalone build only: run as the recording process


def default_python() -> str:
    """The interpreter that runs a target when none is chosen.

    From a Python environment: that environment's interpreter (it has memsight, and usually
    the user's torch). From a standalone build: the first python3 on PATH.
    """
    if not FROZEN:
        return sys.executable
    return shutil.which("python3") or shutil.which("python") or "python3"


def recorder_host_command() -> list[str]:
    """The command that starts a recording process (profiler.recorder.host) for this process,
    whose pid it is given: it ends with this process, even one that dies before it started."""
    parent = str(os.getpid())
    if FROZEN:
        return [sys.executable, RECORDER_HOST_FLAG, parent]
    return [sys.executable, "-m", "memsight.profiler.recorder.host", parent]
