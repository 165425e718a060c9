"""The process's peak RSS as the kernel keeps it, for the workloads' JSON lines.

Imported by the workload scripts beside it (their folder is the first entry of sys.path when
they run as scripts, under python, memsight or a peer profiler).
"""

from __future__ import annotations


def vm_hwm_bytes() -> int:
    """This process's peak RSS so far (VmHWM), in bytes; 0 where /proc is unavailable."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
