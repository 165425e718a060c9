"""What the C heap holds: bytes in live allocations, and bytes freed but kept by malloc.

RSS alone cannot tell a leak from an allocator that keeps what the program freed. glibc's
malloc keeps freed chunks in its heaps for reuse, and after a large buffer is freed it raises
its mmap threshold, so later buffers of that size come from the heap and are kept there too:
RSS climbs steadily while no object holds the memory (a clean Lightning run on CPU climbs by
~1.5 MiB per step this way, all of it released by malloc_trim). glibc's mallinfo2() tells the
two apart: bytes in use (uordblks + hblkhd, mmapped blocks included) and bytes free in the
heaps (fordblks). It walks each arena's free lists under the arena's lock, about 80 us with a
few hundred MiB of heap, so it is read every READ_EVERY_S (further apart if it costs more).

Only glibc 2.33+ has mallinfo2 (mallinfo's int fields wrap at 2 GiB); elsewhere (musl,
macOS) nothing is read. With another malloc preloaded (jemalloc, tcmalloc) glibc's own, unused
heap is read: its numbers stay near zero and explain none of the growth, which is then judged
on RSS as before.
ctypes is imported only once torch is (which imports it itself): nothing new in sys.modules.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, Tuple

READ_EVERY_S = 0.05
MAX_SHARE = 0.01  # of one core: reads come further apart when one costs more than 1 ms
# Readings between iterations are paced by iterations and by their cost, never by the clock:
# each iteration's end is read while the readings so far cost the loop's thread at most
# BOUNDARY_SHARE of the time since the first iteration ended (plus BOUNDARY_FLOOR_S in all,
# so a short loop has every iteration read). A reading costs ~100 us with a few hundred MiB
# of heap: a 20 ms step is read every time, a 1 ms step about every 20th. On a busy machine
# iterations take longer and the readings per iteration do not fall, where a pace in seconds
# left a 20 ms/step loop with one reading in five steps and too few for a verdict.
BOUNDARY_SHARE = 0.005
BOUNDARY_FLOOR_S = 0.005
# While iterations end at least this often, the periodic readings wait: those between
# iterations tell more.
PERIODIC_WAITS_S = 0.1

_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class HeapReader:
    """glibc's mallinfo2(), read as (bytes in use, bytes free in the heaps)."""

    def __init__(self, mallinfo2: Any) -> None:
        self._mallinfo2 = mallinfo2
        self.next_at = 0.0  # when the agent thread's periodic reading is due
        self._boundary_seen_at = -1.0  # the last time an iteration ended, read or not
        self._first_boundary_at: Optional[float] = None
        self._boundary_spent = 0.0  # CPU seconds the readings between iterations took
        self._boundary_cost = 0.0  # the last one's

    @classmethod
    def open(cls) -> Optional["HeapReader"]:
        """A reader, or None where the C library has no mallinfo2."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            import ctypes

            class Mallinfo2(ctypes.Structure):
                _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS]

            function = ctypes.CDLL(None).mallinfo2
        except (ImportError, OSError, AttributeError):
            return None
        function.restype = Mallinfo2
        function.argtypes = []
        return cls(function)

    def read(self) -> Tuple[int, int]:
        info = self._mallinfo2()
        return int(info.uordblks) + int(info.hblkhd), int(info.fordblks)

    def due(self, now: float) -> bool:
        """Whether the periodic reading is due now; it waits while iterations end often.

        Live bytes read between iterations hold no iteration's temporaries, so a steady growth
        of kept tensors shows plainly in them, where the periodic readings catch temporaries at
        random. So while iterations end less than PERIODIC_WAITS_S apart, the readings are
        left to boundary_row: each telling more, and enough of them for a line even in a loop
        of a few seconds.
        """
        if now < self.next_at:
            return False
        if now - self._boundary_seen_at < PERIODIC_WAITS_S:
            self.next_at = self._boundary_seen_at + PERIODIC_WAITS_S
            return False
        return True

    def row(self) -> Tuple[int, int, int, int]:
        """(t, in_use, free, 0), and the time of the next reading, paced by its cost."""
        t, in_use, free, cost = self._timed()
        self.next_at = time.monotonic() + max(READ_EVERY_S, cost / MAX_SHARE)
        return t, in_use, free, 0

    def boundary_row(self) -> Optional[Tuple[int, int, int, int]]:
        """(t, in_use, free, 1) between iterations (an iteration just ended), or None where
        the readings so far have used their share of the loop's time (BOUNDARY_SHARE)."""
        now = self._boundary_seen_at = time.monotonic()
        first = self._first_boundary_at
        if first is None:
            first = self._first_boundary_at = now
        allowed = BOUNDARY_FLOOR_S + BOUNDARY_SHARE * (now - first)
        if self._boundary_spent + self._boundary_cost > allowed:
            return None
        t, in_use, free, cost = self._timed()
        self._boundary_spent += cost
        self._boundary_cost = cost
        return t, in_use, free, 1

    def _timed(self) -> Tuple[int, int, int, float]:
        # CPU time, not wall time: waiting for the GIL or an arena lock costs no CPU, and one
        # slow wake-up must not space the readings out for seconds.
        began = time.thread_time()
        in_use, free = self.read()
        cost = time.thread_time() - began
        return time.monotonic_ns(), in_use, free, cost
