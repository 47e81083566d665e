"""What to do with a gradient computed against older weights: apply it, scale it, or drop it."""

from __future__ import annotations

from dataclasses import dataclass

from ddq.transport.wire import WireError


@dataclass(frozen=True)
class StalenessPolicy:
    """Staleness is how many updates the server applied since the gradient's weights were published.

    `max_staleness` drops gradients older than that; `scaling` divides the
    learning rate by the staleness (Zhang et al. 2016), a fresh gradient
    (staleness 0 or 1) keeping the full step.
    """

    max_staleness: int | None = None
    scaling: bool = False

    def judge(self, current_version: int, base_version: int) -> tuple[int, float | None]:
        """(staleness, learning-rate scale), the scale None when the gradient is to be dropped."""
        staleness = current_version - base_version
        if staleness < 0:
            raise WireError("future_version", f"gradient claims version {base_version}, "
                                              f"but the server is at {current_version}")
        if self.max_staleness is not None and staleness > self.max_staleness:
            return staleness, None
        return staleness, (1.0 / max(staleness, 1) if self.scaling else 1.0)
