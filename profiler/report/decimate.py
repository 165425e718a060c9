"""Thin a long series for a chart without losing its spikes.

Each bucket of consecutive samples keeps its lowest and its highest point, in time order, so
the drawn line still reaches every peak and every trough: a 2 ms spike in a million samples is
as tall in the chart as in the data.
"""

from __future__ import annotations

import numpy as np


def envelope(t: np.ndarray, y: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """At most 2 * buckets points of (t, y), keeping each bucket's min and max."""
    n = len(t)
    if n <= 2 * buckets:
        return np.asarray(t, dtype=np.float64), np.asarray(y, dtype=np.float64)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    starts = edges[:-1]
    lows = np.minimum.reduceat(y, starts)
    highs = np.maximum.reduceat(y, starts)
    # Where in each bucket the extremes are, to keep them in time order.
    bucket = np.repeat(np.arange(buckets), np.diff(edges))
    is_low = y == lows[bucket]
    is_high = y == highs[bucket]
    first_low = _first_index(is_low, bucket, buckets)
    first_high = _first_index(is_high, bucket, buckets)
    a = np.minimum(first_low, first_high)
    b = np.maximum(first_low, first_high)
    index = np.column_stack((a, b)).ravel()
    keep = np.ones(len(index), dtype=bool)
    keep[1::2] = a != b  # a flat bucket needs one point
    index = index[keep]
    return np.asarray(t[index], dtype=np.float64), np.asarray(y[index], dtype=np.float64)


def _first_index(mask: np.ndarray, bucket: np.ndarray, buckets: int) -> np.ndarray:
    positions = np.flatnonzero(mask)
    first = np.full(buckets, -1, dtype=np.int64)
    # Reversed assignment leaves the smallest position for each bucket.
    first[bucket[positions][::-1]] = positions[::-1]
    return first
