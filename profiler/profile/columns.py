"""Same-length numpy columns that grow by appending rows without ever pausing to copy them all.

Doubling a buffer the usual way copies every row at once into memory the OS has never handed
out. Half a million rows of a dozen columns is then ~50 MB of fresh pages in one go: on a
virtual machine over 100 ms of page faults, inside a single GUI frame of a long live run.

Here, once a buffer is half full the next one (twice the size) is allocated, untouched, and
each append also moves a few already-written rows across. Rows are only ever appended, so a
row moved early never changes again; by the time the old buffer is full nearly all of it has
moved, and the switch copies only what arrived since. The page faults are spread over the
appends in proportion to the rows they bring.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

MIN_CAPACITY = 1024
# Rows moved to the next buffer per row appended: the move starts at half capacity, so a rate
# of 2 finishes exactly when the old buffer fills; 3 leaves headroom.
MOVE_RATE = 3
# Only appends this many times smaller than the buffer move rows ahead: live data arrives in
# small blocks; a file loads in a few large ones, where one plain copy at growth is cheaper.
SMALL_APPEND = 64


class ColumnStore:
    """Named columns of one length. Accessors return views valid until the next append."""

    def __init__(self, dtypes: Mapping[str, npt.DTypeLike]) -> None:
        self._dtypes = {name: np.dtype(dtype) for name, dtype in dtypes.items()}
        self._n = 0
        self._cols: dict[str, np.ndarray] = {
            name: np.empty(0, dtype=dtype) for name, dtype in self._dtypes.items()
        }
        self._next: dict[str, np.ndarray] | None = None
        self._moved = 0  # rows [0, _moved) are already in _next
        self._adopted = False  # the columns are arrays taken by adopt() or shared: never written

    def __len__(self) -> int:
        return self._n

    @property
    def capacity(self) -> int:
        return len(next(iter(self._cols.values()))) if self._cols else 0

    def column(self, name: str) -> np.ndarray:
        return self._cols[name][: self._n]

    def frozen(self) -> ColumnStore:
        """A store sharing the rows written so far (views, no copy); appending to it copies."""
        store = ColumnStore(self._dtypes)
        store._cols = {name: col[: self._n] for name, col in self._cols.items()}
        store._n = self._n
        store._adopted = True  # the buffers are shared: never written through it
        return store

    def prefix(self, rows: int) -> ColumnStore:
        """A store sharing the first `rows` rows (views, no copy); appending to it copies."""
        store = self.frozen()
        store._n = max(0, min(rows, self._n))
        store._cols = {name: col[: store._n] for name, col in store._cols.items()}
        return store

    def adopt(self, block: Mapping[str, np.ndarray]) -> bool:
        """Take `block`'s arrays as the columns themselves, without a copy, when the store is
        empty and each is a 1-d contiguous array of its column's dtype, all of one length (a
        file's table decoded whole: a day-long run's copy would cost a second per GB).
        The store never writes into them: its capacity is their length, so its next append
        moves to new buffers. They may be views of arrays kept elsewhere. False, and nothing
        changed, when they cannot be taken."""
        if self._n or set(block) != set(self._dtypes):
            return False
        lengths = set()
        for name, array in block.items():
            if (
                not isinstance(array, np.ndarray)
                or array.ndim != 1
                or array.dtype != self._dtypes[name]
                or not array.flags.c_contiguous
            ):
                return False
            lengths.add(len(array))
        if len(lengths) != 1:
            return False
        self._cols = dict(block)
        self._n = lengths.pop()
        self._next = None
        self._moved = 0
        self._adopted = True
        return True

    def truncate(self, rows: int) -> None:
        """Keep the first `rows` rows. The next append writes over the rest in the store's
        own buffers; adopted or shared arrays are cut to views instead, so it copies."""
        self._n = max(0, min(rows, self._n))
        self._moved = min(self._moved, self._n)
        if self._adopted:
            self._cols = {name: col[: self._n] for name, col in self._cols.items()}

    def append(self, block: Mapping[str, npt.ArrayLike], rows: int) -> None:
        """Append `rows` rows; `block` holds one array (or scalar) per column."""
        if rows <= 0:
            return
        need = self._n + rows
        if need > self.capacity:
            self._grow(need)
        for name, col in self._cols.items():
            col[self._n : need] = block[name]
        self._n = need
        if rows <= self.capacity // SMALL_APPEND:
            self._move_some(MOVE_RATE * rows)

    def _grow(self, need: int) -> None:
        if self._next is not None and need <= len(next(iter(self._next.values()))):
            for name, col in self._next.items():
                col[self._moved : self._n] = self._cols[name][self._moved : self._n]
            self._cols = self._next
        else:
            # A block larger than the buffer ahead (a file loaded in a few big blocks): one
            # copy, sized to fit with room to spare.
            capacity = max(need + need // 2, MIN_CAPACITY)
            grown = {}
            for name, col in self._cols.items():
                grown[name] = np.empty(capacity, dtype=col.dtype)
                grown[name][: self._n] = col[: self._n]
            self._cols = grown
        self._adopted = False
        self._next = None
        self._moved = 0
        if self._n + 1 > self.capacity // 2:
            self._start_next()

    def _start_next(self) -> None:
        capacity = max(2 * self.capacity, MIN_CAPACITY)
        self._next = {name: np.empty(capacity, dtype=dt) for name, dt in self._dtypes.items()}
        self._moved = 0

    def _move_some(self, rows: int) -> None:
        if self._next is None:
            if self._n > self.capacity // 2:
                self._start_next()
            else:
                return
        assert self._next is not None
        end = min(self._n, self._moved + rows)
        for name, col in self._next.items():
            col[self._moved : end] = self._cols[name][self._moved : end]
        self._moved = end
