"""A timeline curve's points, apart from the Qt item that draws them: the rows taken in so
far as float64, and the min/max levels that thin a long run to about two points per pixel.

Nothing here touches Qt, so a finished run's curves can be made ready in a worker thread
(app/opening.py reads a day-long file there) and handed to the GUI thread whole; a running
curve (app/plotting.py's Curve) keeps one of these and extends it by new rows only.
"""

from __future__ import annotations

import numpy as np

from memsight.profiler.profile.columns import ColumnStore
from memsight.profiler.profile.halves import in_halves

LEVEL_FACTOR = 4
MIN_LEVEL_POINTS = 2048  # a curve is thinned into levels once it holds this many points
# While a run goes on, a curve whose view holds LIVE_MIN_SAMPLES_PER_PIXEL samples per pixel
# or more is handed, for its complete blocks of LIVE_FACTOR rows, each block's lowest and
# highest value: a quarter of the points, which pyqtgraph's peak downsampling then takes to
# two per pixel as it would the samples themselves.
LIVE_FACTOR = 8
LIVE_MIN_SAMPLES_PER_PIXEL = 2 * LIVE_FACTOR
# A finished run's curve of this many blocks or more is folded in two threads (a day-long
# run's 1.1 million: 0.2 s a curve in one).
PARALLEL_FOLD_BLOCKS = 1 << 18

# What a curve hands pyqtgraph: its x and y, float64, of one length.
Points = tuple[np.ndarray, np.ndarray]


def _fold(
    values: np.ndarray, op: np.ufunc, factor: int = LEVEL_FACTOR, out: np.ndarray | None = None
) -> np.ndarray:
    """`op` (np.minimum, np.maximum) over each block of `factor` consecutive values, a
    partial last block left out, into `out` when given (a strided view: a level's lows or
    highs, in place). Elementwise over strided views: ten times faster than
    reshape(-1, 4).min(axis=1), which numpy reduces one four-value row at a time (95 ms for
    the curves of a 10-minute run at 1 kHz, in the frame that ends the run)."""
    end = len(values) // factor * factor
    folded: np.ndarray = op(values[0:end:factor], values[1:end:factor], out=out)
    for offset in range(2, factor):
        op(folded, values[offset:end:factor], out=folded)
    return folded


def _fold_all(values: np.ndarray, op: np.ufunc, factor: int) -> np.ndarray:
    """_fold, the partial last block included: a spike in a run's last rows stays drawn."""
    folded = _fold(values, op, factor)
    end = len(folded) * factor
    if end == len(values):
        return folded
    return np.append(folded, op.reduce(values[end:]))


class CurvePoints:
    """One curve's points in growable float64 buffers, extended by new rows only, with the
    live level (each complete block of LIVE_FACTOR rows' lowest and highest value, kept up to
    date as rows arrive) and, once built, the levels of a finished run."""

    def __init__(self) -> None:
        self._points = ColumnStore({"x": np.float64, "y": np.float64})
        self.source_rows = 0  # rows of the source table already taken in
        self.levels: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._levels_of = -1  # the point count the levels were built for
        # Per complete block of LIVE_FACTOR rows: (its first time, its lowest value) and (its
        # first time, its highest value).
        self._live_level = ColumnStore({"x": np.float64, "y": np.float64})
        # build_levels() put the last, partial block's pair at the live level's end (it is
        # the finished run's first level); new rows take it out before they fold.
        self._partial_pair = False

    @property
    def n(self) -> int:
        return len(self._points)

    @property
    def x(self) -> np.ndarray:
        return self._points.column("x")

    @property
    def y(self) -> np.ndarray:
        return self._points.column("y")

    def extend(self, x: np.ndarray, y: np.ndarray, source_rows: int) -> bool:
        """Take in new rows (the source table now has `source_rows`); whether any came."""
        self.source_rows = source_rows
        added = len(x)
        if not added:
            return False
        # A finished run's curves take its times as they are (views, never written to):
        # a day-long run's seven curves would otherwise copy 8.6 million times each.
        points = {"x": _float64(x), "y": _float64(y)}
        if self.n or not self._points.adopt(points):
            self._points.append(points, added)
        self._extend_live_level()
        return True

    def live_points(self, start: float, seconds_per_pixel: float) -> Points:
        """What a running view shows: the points from just before time `start` on (-inf: all
        of them), the live level's blocks instead where they are many to a pixel of
        `seconds_per_pixel` (0: not known, the points themselves)."""
        x, y = self.x, self.y
        first = 0
        if start > -np.inf:
            first = max(0, int(np.searchsorted(x, start)) - 1)
        if not self._dense(first, seconds_per_pixel):
            return x[first:], y[first:]
        begin = 2 * (first // LIVE_FACTOR)  # the level's pair of the block holding `first`
        # The level's blocks, but for the one holding the newest sample: the curve ends on it.
        blocks = min(len(self._live_level) // 2, (self.n - 1) // LIVE_FACTOR)
        level_x, level_y = self._live_level.column("x"), self._live_level.column("y")
        tail = blocks * LIVE_FACTOR
        return (
            np.concatenate((level_x[begin : 2 * blocks], x[tail:])),
            np.concatenate((level_y[begin : 2 * blocks], y[tail:])),
        )

    def _dense(self, first: int, seconds_per_pixel: float) -> bool:
        """Whether the points from row `first` on are many to a pixel of the running view."""
        count = self.n - first
        if count < 2 * LIVE_MIN_SAMPLES_PER_PIXEL or seconds_per_pixel <= 0:
            return False
        x = self.x
        span = float(x[-1] - x[first])
        per_pixel = count / span * seconds_per_pixel if span > 0 else 0.0
        return per_pixel >= LIVE_MIN_SAMPLES_PER_PIXEL

    def _extend_live_level(self) -> None:
        """Fold the complete blocks of LIVE_FACTOR rows that arrived into the live level."""
        if self._partial_pair:
            self._live_level.truncate(len(self._live_level) - 2)
            self._partial_pair = False
        done = len(self._live_level) // 2 * LIVE_FACTOR
        end = self.n // LIVE_FACTOR * LIVE_FACTOR
        if end <= done:
            return
        blocks = (end - done) // LIVE_FACTOR
        level = {"x": np.empty(2 * blocks), "y": np.empty(2 * blocks)}
        x, y = self.x[done:end], self.y[done:end]

        def fold(first: int, last: int) -> None:  # blocks first..last, in place in `level`
            rows = slice(first * LIVE_FACTOR, last * LIVE_FACTOR)
            starts = x[rows][::LIVE_FACTOR]
            level["x"][2 * first : 2 * last : 2] = starts
            level["x"][2 * first + 1 : 2 * last : 2] = starts
            _fold(y[rows], np.minimum, LIVE_FACTOR, level["y"][2 * first : 2 * last : 2])
            _fold(y[rows], np.maximum, LIVE_FACTOR, level["y"][2 * first + 1 : 2 * last : 2])

        in_halves(blocks, fold, PARALLEL_FOLD_BLOCKS)  # a finished run's whole curve
        if len(self._live_level) or not self._live_level.adopt(level):
            self._live_level.append(level, 2 * blocks)

    def build_levels(self) -> None:
        """Min/max summaries at 8x, 32x, 128x ... fewer points, for a finished run; nothing
        to do when they are built for the points there are.

        Each level keeps, for every block of rows (the last one partial), its lowest and its
        highest value, so a spike survives at every zoom; a frame then draws about two points
        per pixel whatever the length of the run. The first is the live level, folded as the
        rows arrived, and each next one folds the one before: the frame that ends a run reads
        an eighth of its rows, not all of them once per level.
        """
        n = self.n
        if n == self._levels_of:
            return
        self._levels_of = n
        self.levels = []
        if n // LIVE_FACTOR < MIN_LEVEL_POINTS:
            return
        level = self._live_level
        pairs_x, pairs_y = level.column("x"), level.column("y")
        tail = len(level) // 2 * LIVE_FACTOR
        if tail < n and not self._partial_pair:  # the last rows, fewer than a block
            rest = self.y[tail:]
            start = float(self.x[tail])
            pair = {"x": np.array((start, start)), "y": np.array((rest.min(), rest.max()))}
            if level.capacity >= len(level) + 2:
                # A live run's level has room to spare: written there, not copied. np.append
                # of each curve's level took 9 of the 13 ms of the levels of a 10-minute
                # 1 kHz run, in the frame that ends it (the copies' fresh pages).
                level.append(pair, 2)
                self._partial_pair = True
                pairs_x, pairs_y = level.column("x"), level.column("y")
            else:  # a file's, taken whole (ColumnStore.adopt): one copy, as growing it would
                pairs_x, pairs_y = np.append(pairs_x, pair["x"]), np.append(pairs_y, pair["y"])
        self.levels.append((LIVE_FACTOR, pairs_x, pairs_y))
        starts, lows, highs = pairs_x[0::2], pairs_y[0::2], pairs_y[1::2]
        factor = LIVE_FACTOR * LEVEL_FACTOR
        while len(starts) > 2 * MIN_LEVEL_POINTS:  # the next level still has a thousand blocks
            starts = starts[::LEVEL_FACTOR]
            lows = _fold_all(lows, np.minimum, LEVEL_FACTOR)
            highs = _fold_all(highs, np.maximum, LEVEL_FACTOR)
            self.levels.append((factor, _pairs(starts, starts), _pairs(lows, highs)))
            factor *= LEVEL_FACTOR

    def range_points(self, low: float, high: float, pixels: int) -> Points:
        """The points of the level that gives about two per pixel between low and high (the
        samples themselves, with one either side, where they are fewer)."""
        x = self.x
        first = max(0, int(np.searchsorted(x, low)) - 1)
        last = min(self.n, int(np.searchsorted(x, high)) + 1)
        wanted = max(1, (last - first) // max(pixels, 1))
        level = None
        for candidate in self.levels:
            if candidate[0] <= wanted:
                level = candidate
        if level is None:  # zoomed in to single samples: those in view and one either side
            return x[first:last], self.y[first:last]
        factor, xs, ys = level
        a, b = 2 * (first // factor), 2 * (last // factor + 1)
        return xs[a:b], ys[a:b]


def _float64(values: np.ndarray) -> np.ndarray:
    """`values` as float64: itself when it is, else converted, a long column in two halves
    on two threads (a day-long run's RSS: 8.6 million values, 0.13 s in one)."""
    if values.dtype == np.float64:
        return values
    out = np.empty(len(values), dtype=np.float64)

    def convert(start: int, stop: int) -> None:
        out[start:stop] = values[start:stop]

    in_halves(len(values), convert, PARALLEL_FOLD_BLOCKS * LIVE_FACTOR)
    return out


def _pairs(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """first[0], second[0], first[1], second[1], ...: two strided copies (np.repeat of one
    array takes 2.5 times as long)."""
    out = np.empty(2 * len(first), dtype=np.float64)
    out[0::2] = first
    out[1::2] = second
    return out
