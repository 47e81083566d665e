"""Long numeric series kept in growing NumPy columns, and their downsampling for the page.

A run of 10^6 updates logs hundreds of thousands of episodes; the page asks
for a few hundred points. Each point of a downsampled series is the mean of a
bucket of consecutive rows, and a spread column also keeps its bucket's
minimum and maximum, so a noisy return curve keeps both its trend and its range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from ddq.transport.values import finite_number

# The most columns a list is mirrored into: its entries come from Redis, where every executor may write, and
# each new name costs a column of every row (a progress point has about 20, and one a network layer).
MAX_COLUMNS = 256


class Columns:
    """Named float64 columns that grow by whole rows; a row's missing or non-numeric value is NaN.

    Columns named for the first time later start as NaN for the rows before them; names past MAX_COLUMNS
    are left out."""

    def __init__(self, capacity: int = 1024):
        self.size = 0
        self._capacity = capacity
        self._data: dict[str, np.ndarray] = {}

    def _column(self, name: str) -> np.ndarray | None:
        if name not in self._data:
            if len(self._data) >= MAX_COLUMNS:
                return None
            self._data[name] = np.full(self._capacity, np.nan)
        return self._data[name]

    def _reserve(self, rows: int) -> None:
        if self.size + rows <= self._capacity:
            return
        self._capacity = max(2 * self._capacity, self.size + rows)
        for name, old in self._data.items():
            grown = np.full(self._capacity, np.nan)
            grown[:self.size] = old[:self.size]
            self._data[name] = grown

    def append(self, rows: Sequence[dict[str, object]]) -> None:
        self._reserve(len(rows))
        for offset, row in enumerate(rows):
            for name, value in row.items():
                number = finite_number(value)
                if number is not None and (column := self._column(name)) is not None:
                    column[self.size + offset] = number
        self.size += len(rows)

    def names(self) -> list[str]:
        return list(self._data)

    def get(self, name: str) -> np.ndarray:
        """The column's values so far (a view; NaN throughout for a name never seen)."""
        if name not in self._data:
            return np.full(self.size, np.nan)
        return self._data[name][:self.size]


def bucket_starts(rows: int, points: int) -> np.ndarray:
    """First row of each of at most `points` buckets of nearly equal size covering `rows` rows."""
    if rows <= points:
        return np.arange(rows)
    return np.unique(np.linspace(0, rows, points, endpoint=False).astype(np.int64))


def bucket_means(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each bucket's mean over its finite values (NaN for a bucket with none)."""
    finite = np.isfinite(values)
    sums = np.add.reduceat(np.where(finite, values, 0.0), starts)
    counts = np.add.reduceat(finite.astype(np.int64), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


SIGNIFICANT_DIGITS = 7  # a chart needs far fewer; seven keep env-step counts of millions exact


def json_list(values: np.ndarray) -> list[float | None]:
    """Plain floats for JSON, to SIGNIFICANT_DIGITS (half the bytes of full doubles for the page to
    fetch and parse), None where a value is NaN or infinite (JSON has neither)."""
    return [float(f"{v:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(v) else None for v in values.tolist()]


def downsample(columns: dict[str, np.ndarray], points: int, spread: Iterable[str] = ()) -> dict[str, list]:
    """At most `points` rows of equally long `columns`, bucket means; `spread` columns also get
    `<name>_min` and `<name>_max`. Short series come back whole."""
    rows = len(next(iter(columns.values()))) if columns else 0
    starts = bucket_starts(rows, points)
    spread = set(spread)
    out: dict[str, list] = {}
    for name, values in columns.items():
        if rows == 0:
            out[name] = []
            if name in spread:
                out[f"{name}_min"] = out[f"{name}_max"] = []
            continue
        whole = len(starts) == rows
        out[name] = json_list(values if whole else bucket_means(values, starts))
        if name in spread:
            with np.errstate(invalid="ignore"):
                out[f"{name}_min"] = json_list(values if whole else np.fmin.reduceat(values, starts))
                out[f"{name}_max"] = json_list(values if whole else np.fmax.reduceat(values, starts))
    return out
