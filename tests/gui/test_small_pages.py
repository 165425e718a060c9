"""The app's large arrays are in small pages: a running timeline's growing curves then zero
their new memory a little each frame, not 2 MiB at a time in the same frame (app/main.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import child_env

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

# Bytes of a 64 MiB array, written, that the kernel backs by huge pages (smaps' AnonHugePages
# of the mapping holding it), before and after the app's switch.
HUGE_BYTES = """
import numpy as np
from memsight.app.main import use_small_pages

def huge_kib() -> int:
    array = np.ones(8 << 20)  # 64 MiB, every page written
    start, end = array.ctypes.data, array.ctypes.data + array.nbytes
    kib, inside = 0, False
    for line in open("/proc/self/smaps"):  # madvise splits the array's mapping in several
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low < end and start < high
        elif inside and head == "AnonHugePages:":
            kib += int(line.split()[1])
    return kib

before = huge_kib()
use_small_pages()
print(before, huge_kib())
"""


def test_after_the_apps_switch_numpy_arrays_take_no_huge_pages() -> None:
    if not THP.exists() or "[never]" in THP.read_text():
        pytest.skip("this kernel gives no transparent huge pages")
    done = subprocess.run(
        [sys.executable, "-c", HUGE_BYTES],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    before, after = (int(kib) for kib in done.stdout.split())
    if not before:
        pytest.skip("the kernel gave numpy no huge pages even when asked (none free)")
    assert after == 0, f"{after} KiB of the array in huge pages after the switch"
