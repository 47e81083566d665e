"""The checks settings share: a value within its range, the line naming the setting and what it got."""

from __future__ import annotations

import math
from typing import Any


def is_positive(value: float) -> bool:
    """Above 0 and finite: nan and inf, which float flags take, are no settings' values."""
    return 0 < value < math.inf


def positive(config: Any, *names: str) -> None:
    for name in names:
        if not is_positive(getattr(config, name)):
            raise ValueError(f"{name} must be positive, got {getattr(config, name)}")


def finite_or_none(config: Any, *names: str) -> None:
    for name in names:
        if getattr(config, name) is not None and not math.isfinite(getattr(config, name)):
            raise ValueError(f"{name} must be a finite number (or none), got {getattr(config, name)}")


def fraction(config: Any, *names: str) -> None:
    for name in names:
        if not 0 <= getattr(config, name) <= 1:
            raise ValueError(f"{name} must be between 0 and 1, got {getattr(config, name)}")


def positive_or_none(config: Any, *names: str) -> None:
    for name in names:
        if getattr(config, name) is not None and not is_positive(getattr(config, name)):
            raise ValueError(f"{name} must be positive (or none), got {getattr(config, name)}")
