"""Values read back from Redis as numbers, whoever wrote them: every executor holds the run's password, so a
value is data to check, and what is not a number of ours reads as missing, never as an error."""

from __future__ import annotations

import math
import re

COUNTER = re.compile(r"-?[0-9]{1,18}")  # a whole number within INCRBY's 64 bits, in ASCII digits


def finite_number(value: object) -> float | None:
    """A JSON value as a finite float; None for anything else: text, a bool, NaN, Infinity, or a number past a
    float's range (Python's JSON reads NaN and 1e400 as floats, and 10**400 as an int)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def counter_value(raw: bytes | str | None, missing: int = 0) -> int:
    """A counter's value (what INCRBY, or SET of a whole number, keeps); `missing` where there is none, or
    where the key holds anything else."""
    if isinstance(raw, bytes):
        raw = raw.decode("ascii", errors="replace")
    return int(raw) if raw and COUNTER.fullmatch(raw) else missing
