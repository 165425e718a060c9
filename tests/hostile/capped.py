"""Run memsight in a subprocess under an address-space cap (RLIMIT_AS), so a file that makes it
allocate too much fails a test with a clean MemoryError instead of eating the machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import child_env

# What one `memsight report` may map: the interpreter, numpy and the rules take about 400 MiB
# of address space before any profile is read.
CAP_BYTES = 1536 << 20


def capped_python(
    code: str, *args: str, cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    prelude = (
        f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({CAP_BYTES}, {CAP_BYTES}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def capped_memsight(
    *args: str | os.PathLike[str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`memsight ARGS` as the console script runs it, under the cap."""
    code = "import sys; from memsight.profiler.cli import main; sys.exit(main(sys.argv[1:]))"
    return capped_python(code, *(os.fspath(a) for a in args), cwd=cwd, timeout=timeout)


def peak_rss_bytes() -> int:
    """This process' own peak resident set (VmHWM). Not getrusage's ru_maxrss: a process
    started by fork (or vfork) and exec inherits there the high-water mark of its parent's
    address space, so a child of a large pytest process would report the parent's size."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")
