"""CPU hogs beside the test suite: proof that memsight's verdicts hold on a busy machine.

`python -m pytest --cpu-hogs=N` (or `MEMSIGHT_TEST_CPU_HOGS=N python -m pytest`, which leaves
the command as it is) starts N busy loops before the first test and ends them when the session
ends. `auto` is two per core this process may run on (`nproc`), so every core is contended
twice over, as on a shared CI runner or a laptop compiling beside the training.

The hogs are plain processes at the suite's own priority, each a Python loop that does nothing
but spin. None may outlive the session, however it ends:

* at the end of the session, on Ctrl+C and on an error the session survives, `CpuHogs.stop`
  (the session fixture's teardown, and an `atexit` handler behind it) kills each one;
* when the session dies without cleaning up (SIGKILL, SIGTERM, a crash of the interpreter),
  the kernel kills each hog (it asks for PR_SET_PDEATHSIG, SIGKILL, as it starts), and where
  that is not available (not Linux) each hog sees within `PARENT_POLL_S` that its parent is
  gone and exits.

Each hog runs in a session of its own (`start_new_session`), so a test that signals its own
process group, or a terminal's Ctrl+C, never reaches the hogs, and they never reach a test.
`UNDER_LOAD` is the tier CI runs a second time beside the hogs, `python -m pytest -q -m
under_load --cpu-hogs=auto` (.ci/run): the tests whose verdicts or readings depend on time,
chosen to take about 10 minutes under load on a 2-core runner (about 3 1/2 quietly). The whole
suite under load takes three times the README command's 20-odd minutes, too long for each
push; benchmarks/verdicts_under_load.py compares every example and client program instead.

Wired into the suite by tests/conftest.py; tested by tests/test_load_harness.py.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
from collections.abc import MutableMapping
from types import TracebackType

OPTION = "--cpu-hogs"
ENV_VAR = "MEMSIGHT_TEST_CPU_HOGS"
# In each hog's command line, so a hog is told from any other python in `ps` and /proc.
MARKER = "memsight-cpu-hog"
PARENT_POLL_S = 0.5

# The marker of the tier below, set at collection (tests/conftest.py).
MARK = "under_load"
_EXAMPLE = "tests/test_examples.py::test_example_gives_exactly_its_findings"
_CLIENT = (
    "tests/clients/test_frameworks.py"
    "::test_a_framework_program_runs_as_under_python_and_gets_exactly_its_findings"
)
# A folder, a file or a test's node id, and why it is in the tier.
UNDER_LOAD: dict[str, str] = {
    "tests/diagnosis": "the end-to-end diagnosis tests: growth judged over time on real runs "
    "paced by the clock, the rules on every prefix of a live run, the fixes of recorded runs "
    "(the synthetic tests beside them cost a second)",
    "tests/agent/test_heap.py": "the C heap read between iterations: what growth is judged on",
    "tests/agent/test_script_end.py": "the script's end, where the rules stop judging",
    f"{_EXAMPLE}[clean_training.py]": "the longest clean control, with workers and evaluation; "
    "the slowest test under load (5 times its quiet time)",
    f"{_EXAMPLE}[growth_per_iteration.py]": "the leak every loop shape is measured against",
    f"{_EXAMPLE}[cache_fills_once.py]": "a climb that stops: not growth, however slow the steps",
    f"{_EXAMPLE}[too_short_to_judge.py]": "a run cut short, not a leak or a clean run",
    f"{_EXAMPLE}[dataloader_worker_growth.py]": "workers' memory, read on a CPU budget",
    f"{_EXAMPLE}[clean_short_eval_loader.py]": "workers that live a fraction of a second",
    f"{_EXAMPLE}[rank_imbalance.py]": "two spawned ranks, which a busy machine sets apart",
    f"{_EXAMPLE}[holder_local.py]": "a holder named by censuses: a script slow to reach its "
    "loop had its censuses on the clock first, and the loop's none",
    f"{_CLIENT}[hand_sgd]": "a clean loop without torch.optim",
    f"{_CLIENT}[hand_sgd---leak]": "the same loop leaking",
    f"{_CLIENT}[eval_loss_sum]": "an evaluation loop keeping its graphs",
    f"{_CLIENT}[-m-torch.distributed.run---nproc_per_node-2-ddp_gloo]": "DDP under torchrun",
}

# Runs with `python -I -S -c`: no site, no environment, only the standard library.
# argv: [-c, MARKER, parent pid]. It exits as soon as its parent is not the one that started it.
HOG_SOURCE = f"""\
import os, sys, time
parent = int(sys.argv[2])
try:
    import ctypes
    # PR_SET_PDEATHSIG (1), SIGKILL (9): the kernel ends this hog when its parent dies.
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)
except Exception:
    pass  # not Linux: the poll below is enough
while os.getppid() == parent:  # a parent that died before prctl is seen here too
    until = time.monotonic() + {PARENT_POLL_S!r}
    while time.monotonic() < until:
        pass
"""


# With every core busy, torch's OpenMP threads wait for each other by spinning: a thread spins
# at a barrier for a peer that the busy loops keep off the CPU. Measured here (2 cores, 4
# hogs): 300 steps of a small MLP took 21.7 s with torch's 2 intra-op threads and 0.49 s with
# one, 44 times longer; a clean training example ran past its 180 s limit. That slowdown is
# torch's under any profiler, and it only stretches the tests past their limits: under load
# the programs the suite starts get one intra-op thread, as a job sharing its machine is told
# to run (`torch.set_num_threads`). The busy loops still take two thirds of every core.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


# Under load every deadline of the suite's helpers (tests/support.py: a run's time limit, a
# wait for what a run leaves on disk) is stretched by this factor, set by tests/conftest.py:
# 1 + hogs / cores, the share of a core a test keeps beside the hogs. A deadline only guards
# against a hang, it asserts no speed (speed is benchmarks/' job), and a busy machine is slow.
_deadline_scale = 1.0


def set_load(hogs: int) -> None:
    """Stretch the suite's deadlines for `hogs` busy loops beside it (see `deadline`)."""
    global _deadline_scale
    _deadline_scale = 1.0 + hogs / cores()


def deadline(seconds: float) -> float:
    """`seconds`, a helper's time limit on a quiet machine, stretched for the load declared by
    --cpu-hogs (1 + hogs / cores: 3 times for 4 hogs on 2 cores)."""
    return seconds * _deadline_scale


def one_thread_per_program(environ: MutableMapping[str, str]) -> None:
    """One intra-op thread for torch in every program started with `environ`, unless the
    user chose a number (see THREAD_VARIABLES)."""
    for name in THREAD_VARIABLES:
        environ.setdefault(name, "1")


def selects(entry: str, nodeid: str) -> bool:
    """Whether `entry` of `UNDER_LOAD` (a folder, a file, a test) names the test `nodeid`."""
    return nodeid == entry or nodeid.startswith((f"{entry}::", f"{entry}/", f"{entry}["))


def under_load(nodeid: str) -> bool:
    """Whether the test `nodeid` (relative to the repository) is in the tier `UNDER_LOAD`."""
    return any(selects(entry, nodeid) for entry in UNDER_LOAD)


def cores() -> int:
    """The cores this process may run on: what `nproc` prints."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def parse_hogs(value: str) -> int:
    """How many hogs `value` asks for: a count (0 for none) or `auto` (two per core)."""
    text = value.strip().lower()
    if text == "auto":
        return 2 * cores()
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"expected a count of busy loops (0 for none) or 'auto', got {value!r}")
    return count


class CpuHogs:
    """N busy-loop processes, started by `start` and killed by `stop` (both idempotent)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes]

    def start(self) -> None:
        if self._processes or self.count <= 0:
            return
        atexit.register(self.stop)  # behind the fixture's teardown, for an exit that skips it
        try:
            for _ in range(self.count):
                self._processes.append(
                    subprocess.Popen(
                        [sys.executable, "-I", "-S", "-c", HOG_SOURCE, MARKER, str(os.getpid())],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        close_fds=True,
                        start_new_session=True,
                    )
                )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        processes, self._processes = self._processes, []
        for process in processes:
            with contextlib.suppress(OSError):
                process.kill()
        for process in processes:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                process.wait(timeout=10)
        atexit.unregister(self.stop)

    def __enter__(self) -> CpuHogs:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
