"""Memory of child processes is measured per child, without double-counting shared pages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.recorder import proctree
from tests.support import run_memsight, wait_until, write_script

MiB = 1024 * 1024

FORKING = """
import multiprocessing as mp, os, sys, time

shared = bytearray(150 * 1024 * 1024)            # touched in the parent, shared after fork
for i in range(0, len(shared), 4096):
    shared[i] = 1

def worker(own_mib, ready):
    own = bytearray(own_mib * 1024 * 1024)       # private to this child
    for i in range(0, len(own), 4096):
        own[i] = 1
    ready.set()
    time.sleep(3)

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    events = [ctx.Event(), ctx.Event()]
    procs = [ctx.Process(target=worker, args=(mib, ev)) for mib, ev in zip((40, 80), events)]
    for p in procs:
        p.start()
    for ev in events:
        ev.wait()
    time.sleep(1.5)
    for p in procs:
        p.join()
"""


@pytest.mark.slow  # records a run that forks or holds memory for seconds
def test_each_child_is_identified_and_measured_by_its_private_memory(tmp_path: Path) -> None:
    write_script(tmp_path, "fork.py", FORKING)
    traced = run_memsight(["fork.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    profile = traced.profile()
    workers = [
        c for c in profile.children.values() if c.cmdline and "fork.py" in " ".join(c.cmdline)
    ]
    assert len(workers) >= 2
    table = profile.tables["children"]
    peaks = sorted(
        int(table["uss"][table["pid"] == c.pid].max())
        for c in workers
        if (table["pid"] == c.pid).any()
    )
    # Each worker's USS is its own allocation (40 / 80 MiB) plus small overhead: the 150 MiB
    # inherited from the parent is shared, so it is not counted again.
    assert 38 * MiB < peaks[-2] < 70 * MiB
    assert 78 * MiB < peaks[-1] < 110 * MiB
    ram = profile.ram
    assert ram is not None
    tree = ram["rss"] + ram["children"]
    assert int(tree.max()) < int(ram["rss"].max()) + 200 * MiB
    assert int(ram["children"].max()) > 110 * MiB
    assert all(c.exited is not None for c in workers)


def test_descendants_include_grandchildren_and_tell_reused_pids_apart() -> None:
    code = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); print(p.pid, flush=True); time.sleep(30)"
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    ) as parent:  # closes the pipe when done
        try:
            assert parent.stdout is not None
            grandchild = int(parent.stdout.readline())
            found = proctree.descendants(os.getpid())
            assert parent.pid in found and grandchild in found
            assert found[grandchild].ppid == parent.pid
            assert found[grandchild].start >= found[parent.pid].start
        finally:
            parent.kill()
            parent.wait()
            subprocess.run(["kill", "-9", str(grandchild)], check=False)


def test_main_process_reader_reports_rss_and_a_high_water_mark_that_includes_spikes() -> None:
    code = (
        "import sys\n"
        "b = bytearray(120 * 1024 * 1024)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "del b\n"
        "print('ok', flush=True); sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:  # closes the pipes when done
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ok\n"
            reader = proctree.MainProcessReader(proc.pid)
            reading = reader.read()
            assert reading is not None
            rss, hwm = reading
            assert (
                hwm - rss > 100 * MiB
            )  # the freed 120 MiB spike still shows in the high-water mark
        finally:
            proc.kill()
            proc.wait()


def test_a_read_that_fails_says_why() -> None:
    # A run that records no sample says why (Recording's warning): the reader keeps the reason.
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    reader = proctree.MainProcessReader(proc.pid)
    try:
        wait_until(lambda: _state(proc.pid) == "Z", 30, "the child to be a zombie")
        assert reader.read() is None
        assert reader.failure == f"/proc/{proc.pid}/status has no memory lines (it exited)"
        proc.wait()  # reaped: its /proc entry is gone
        assert reader.read() is None
        assert reader.failure.startswith(f"reading the memory of pid {proc.pid}: ")
    finally:
        reader.close()
        proc.wait()


def _state(pid: int) -> str:
    """The process' state letter from /proc/PID/stat ("R", "S", "Z"...)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_child_memory_reads_uss_pss_and_rss_of_a_live_process() -> None:
    memory = proctree.child_memory(os.getpid())
    assert memory is not None
    assert 0 < memory.uss <= memory.pss <= memory.rss
    assert proctree.child_memory(2**22 + 12345) is None


@pytest.mark.slow  # records a run that forks or holds memory for seconds
def test_the_peak_channel_keeps_the_full_height_of_a_short_spike(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "spike.py",
        """
        import time
        time.sleep(0.5)
        b = bytearray(200 * 1024 * 1024)
        for i in range(0, len(b), 4096): b[i] = 1
        del b
        time.sleep(0.5)
        """,
    )
    traced = run_memsight(["--interval-ms", "400", "spike.py"], tmp_path)
    ram = traced.profile().ram
    assert ram is not None
    # Whether or not a sample landed inside the spike, its height is in the peak channel.
    assert int(np.max(ram["rss_peak"])) - int(np.min(ram["rss"])) > 195 * MiB


# Finding children cheaply, their role, their RSS between USS readings ----------------------


def test_descendants_from_the_children_files_are_those_of_a_walk_of_proc() -> None:
    code = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "def start():\n"  # a child forked from another thread than the main one
        "    global p\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "t = threading.Thread(target=start); t.start(); t.join()\n"
        "q = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(p.pid, q.pid, flush=True); time.sleep(30)\n"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as top:
        try:
            assert top.stdout is not None
            pids = [int(p) for p in top.stdout.readline().split()]
            if not proctree.HAS_CHILDREN_FILES:
                pytest.skip("this kernel has no /proc/PID/task/TID/children")
            walked = proctree._descendants_proc_walk(os.getpid())
            fast = proctree._descendants_children_files(os.getpid())
            assert set(pids) <= set(fast)
            assert fast == walked
            assert proctree.descendants(os.getpid()) == fast
        finally:
            top.kill()
            top.wait()
            for pid in pids:
                subprocess.run(["kill", "-9", str(pid)], check=False)


def test_the_pid_counter_hands_over_the_pids_allocated_since_the_last_look() -> None:
    counter = proctree.PidCounter()
    try:
        assert counter.advance() is None  # the first look: nothing to compare with
        done = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        new = counter.advance()
        assert new is not None and int(done.stdout) in new
        following = counter.advance()  # the next look goes on where this one stopped
        assert following is None or following.start == new.stop
    finally:
        counter.close()


CHILD_WITH_THREAD_AND_GRANDCHILD = """
import os, subprocess, sys, threading, time
stop = threading.Event()
thread = threading.Thread(target=stop.wait)
thread.start()
grandchild = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE)
print(threading.get_native_id(), thread.native_id, grandchild.pid, flush=True)
sys.stdin.readline()
stop.set()
grandchild.stdin.close()
grandchild.wait()
"""


@pytest.mark.skipif(not proctree.IS_LINUX, reason="reads /proc")
def test_new_pids_are_checked_for_descendants_threads_left_out() -> None:
    counter = proctree.PidCounter()
    counter.advance()
    with subprocess.Popen(
        [sys.executable, "-c", CHILD_WITH_THREAD_AND_GRANDCHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            main_tid, thread_tid, grandchild = map(int, child.stdout.readline().split())
            new = counter.advance()
            assert new is not None and {child.pid, thread_tid, grandchild} <= set(new)
            found, _ = proctree.new_descendants(new, {os.getpid()})
            # The child, and its own child in the same pass; not the child's thread, whose
            # /proc/TID/stat names the same parent as the child itself.
            assert set(found) >= {child.pid, grandchild} and thread_tid not in found
            assert found[grandchild].ppid == child.pid == main_tid
            assert found == {p: i for p, i in proctree.descendants(os.getpid()).items() if p in new}
            # A pid with no /proc entry (not yet visible, or already gone) is handed back.
            gone = subprocess.run(
                [sys.executable, "-c", "import os; print(os.getpid())"],
                capture_output=True,
                text=True,
                check=True,
            )
            _, unseen = proctree.new_descendants([int(gone.stdout)], {os.getpid()})
            assert unseen == [int(gone.stdout)]
        finally:
            child.stdin.close()
            child.wait()
            counter.close()


def test_the_resident_reader_follows_its_process_until_it_exits() -> None:
    import time

    code = "b = bytearray(50 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ok', flush=True); input()\n"
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "ok\n"
        reader = proctree.ResidentReader.open(proc.pid)
        assert reader is not None
        try:
            rss = reader.read()
            assert rss is not None and rss > 50 * MiB
            proc.kill()
            deadline = time.monotonic() + 5
            while reader.read() is not None and time.monotonic() < deadline:
                time.sleep(0.01)  # a zombie shows no memory: gone before it is reaped
            assert reader.read() is None
            proc.wait()
            assert reader.read() is None
        finally:
            reader.close()
    assert proctree.ResidentReader.open(2**22 + 12345) is None


def test_a_childs_role_comes_from_the_name_torch_gives_its_dataloader_workers() -> None:
    assert proctree.child_role("pt_data_worker") == protocol.CHILD_ROLE_DATALOADER_WORKER
    for name in ("python3", "python", "pt_main_thread", "pt_elastic", "pt_data_pin"):
        assert proctree.child_role(name) == protocol.CHILD_ROLE_OTHER


@pytest.mark.parametrize(
    "code, expected",
    [("raise SystemExit(3)", (3, None)), ("import os; os.kill(os.getpid(), 9)", (None, 9))],
)
def test_how_a_child_ended_is_read_while_it_is_a_zombie(
    code: str, expected: tuple[int | None, int | None]
) -> None:
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        # Not waited for: it stays a zombie, and its status stays in /proc until collected.
        found = wait_until(lambda: proctree.exit_status(child.pid), 10, "the child to exit")
        assert found == expected
        assert proctree.identity(child.pid) is None  # a zombie has no identity any more
    finally:
        child.wait()
    assert proctree.exit_status(child.pid) is None  # collected: gone
    assert proctree.exit_status(os.getpid()) is None  # a live process has no exit status
