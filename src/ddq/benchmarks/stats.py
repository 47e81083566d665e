"""The statistics the benches' tables print, each rule written once: a run that missed its target (None) counts
as worse than any run that reached it, so a median is a miss only where half the runs or more missed."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def median(values: Sequence[float | None], worst: float = math.inf) -> float | None:
    """The median, each None counted as `worst` (inf for times and steps, -inf for scores, where higher is
    better); None where there are no values, or where the median itself is a miss."""
    if not values:
        return None
    middle = statistics.median([worst if value is None else value for value in values])
    return None if math.isinf(middle) else middle


def quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated between neighbours (as a spreadsheet's QUARTILE);
    infinite values stay infinite, and a position that falls on a value is that value."""
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    fraction = position - below
    if fraction == 0:
        return ordered[below]
    return ordered[below] + fraction * (ordered[below + 1] - ordered[below])
