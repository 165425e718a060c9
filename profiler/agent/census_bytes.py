"""The census' byte accounting: what a storage adds to what is counted (address ranges, so a
buffer that several storages or tensors share counts once), which CPU storages lie in file
mappings (the page cache's memory, not the process' own), the process' peak RSS (the census'
own memory cap is a share of it), and the visited set once a set of ids would cost too much.

Plain arithmetic over addresses and sizes, apart from the walk: none of it reads an object of
the program. Stdlib only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

import bisect
from typing import Dict, List, Set, Tuple


def _rss() -> int:
    """The process' peak resident set, in bytes (0 where it cannot be read). From getrusage,
    not a file: reading one lets go of the GIL, and with busy threads in the script getting it
    back can take a while."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError, ValueError):
        return 0


class _Bitmap:
    """A set of object addresses, one bit per 16 bytes (CPython's objects are 16-byte aligned),
    in pages of 64 KiB of address space: about 1/128 of the heap it covers, against ~60 bytes
    an object for a set of ids."""

    __slots__ = ("before", "pages")

    def __init__(self, before: Set[int]) -> None:
        self.before = before  # the set it takes over from, kept as it is: no pause to copy it
        self.pages: Dict[int, bytearray] = {}

    def add(self, i: int) -> None:
        page = self.pages.get(i >> 16)
        if page is None:
            page = self.pages[i >> 16] = bytearray(512)
        bit = (i & 0xFFFF) >> 4
        page[bit >> 3] |= 1 << (bit & 7)

    def __contains__(self, i: int) -> bool:
        page = self.pages.get(i >> 16)
        if page is None:
            return i in self.before
        bit = (i & 0xFFFF) >> 4
        return bool(page[bit >> 3] & (1 << (bit & 7))) or i in self.before

    def __len__(self) -> int:
        return len(self.before) + len(self.pages)

    def nbytes(self) -> int:
        # The bytearray, its object and the dict's slot a page; the set's ids.
        return len(self.pages) * (512 + 57 + 100) + 60 * len(self.before)


class _Ranges:
    """Address ranges counted so far, per device: what a new storage adds is the part of its
    range none of them covers."""

    __slots__ = ("by_device",)

    def __init__(self) -> None:
        # device -> (starts, ends): sorted, disjoint, not touching
        self.by_device: Dict[str, Tuple[List[int], List[int]]] = {}

    def add(self, device: str, start: int, size: int) -> int:
        """Cover [start, start + size); the bytes it newly covers."""
        if size <= 0:
            return 0
        starts, ends = self.by_device.setdefault(device, ([], []))
        end = start + size
        lo = bisect.bisect_left(ends, start)  # the first range that ends at or after start
        hi = bisect.bisect_right(starts, end)  # past the last range that starts by end
        if lo == hi:
            starts.insert(lo, start)
            ends.insert(lo, end)
            return size
        covered = sum(min(ends[k], end) - max(starts[k], start) for k in range(lo, hi))
        new_start, new_end = min(starts[lo], start), max(ends[hi - 1], end)
        starts[lo:hi] = [new_start]
        ends[lo:hi] = [new_end]
        return size - max(0, covered)


def _file_mappings() -> Tuple[List[int], List[int]]:
    """The process' mappings of files, from /proc/self/maps: sorted starts and their ends."""
    starts: List[int] = []
    ends: List[int] = []
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) < 6 or not fields[5].startswith(b"/"):
                    continue  # anonymous memory, the heap, the stack
                low, _, high = fields[0].partition(b"-")
                starts.append(int(low, 16))
                ends.append(int(high, 16))
    except (OSError, ValueError):
        return [], []
    return starts, ends


def _union_bytes(storages: Dict[Tuple[str, int], Tuple[int, str, str]]) -> int:
    """The bytes of the storages' address ranges, each byte once."""
    ranges = _Ranges()
    total = 0
    for (dev, ptr), (nbytes, _dev, _dt) in sorted(storages.items()):
        total += ranges.add(dev, ptr, nbytes) if dev else nbytes
    return total
