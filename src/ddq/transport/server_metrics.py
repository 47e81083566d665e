"""The babysitting numbers a weights owner publishes (a parameter-server shard, or the actor-learner
learner in shard 0's place): update rate, staleness, rejections, per-layer ratios."""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter

import torch

from ddq.transport.keys import readable_names

log = logging.getLogger("ddq.param_server")


def layer_segments(layout: list[tuple[str, tuple[int, ...]]], bounds: tuple[int, int]) -> list[tuple[str, int, int]]:
    """(readable parameter name, start, end) of each parameter's part inside a shard's slice, relative to it."""
    segments, offset = [], 0
    start, end = bounds
    for name, (_, shape) in zip(readable_names(layout), layout):
        size = math.prod(shape)
        lo, hi = max(offset, start), min(offset + size, end)
        if lo < hi:
            segments.append((name, lo - start, hi - start))
        offset += size
    return segments


class ServerMetrics:
    """Counts what the server did; `report()` is the JSON it publishes for the dashboard."""

    def __init__(self, segments: list[tuple[str, int, int]], layer_interval_s: float = 1.0):
        self.segments = segments
        self.applied = self.dropped_stale = 0
        self.rejected: Counter[str] = Counter()
        self.staleness: Counter[int] = Counter()
        self.layers: list[dict] = []
        self.layer_interval_s = layer_interval_s
        self._next_layer_sample = 0.0
        self._loss_sum, self._loss_count = 0.0, 0
        self._max_q_sum, self._max_q_count = 0.0, 0  # actor-learner's learner measures it (its actors train nothing)
        self._window = (time.monotonic(), 0)
        self.updates_per_s = 0.0

    def reject(self, reason: str, detail: str, shard: int) -> None:
        if not self.rejected[reason]:  # one clear line per kind of bad input; the rest is counted
            log.warning("shard %d rejected a message (%s): %s; further '%s' rejections are only counted",
                        shard, reason, detail, reason)
        self.rejected[reason] += 1

    def accept(self, staleness: int, loss: float, mean_max_q: float | None = None) -> None:
        self.applied += 1
        self.staleness[staleness] += 1
        if math.isfinite(loss):
            self._loss_sum += loss
            self._loss_count += 1
        if mean_max_q is not None and math.isfinite(mean_max_q):
            self._max_q_sum += mean_max_q
            self._max_q_count += 1

    def drop_stale(self, staleness: int) -> None:
        self.dropped_stale += 1
        self.staleness[staleness] += 1

    def wants_layer_sample(self) -> bool:
        return time.monotonic() >= self._next_layer_sample

    def record_layers(self, before: torch.Tensor, after: torch.Tensor, grad: torch.Tensor) -> None:
        """cs231n's babysitting numbers per layer from one update: norms and the update/weight ratio."""
        self._next_layer_sample = time.monotonic() + self.layer_interval_s
        rows = []
        for name, lo, hi in self.segments:
            weight_norm = float(after[lo:hi].norm())
            update_norm = float((after[lo:hi] - before[lo:hi]).norm())
            rows.append({"name": name, "weight_norm": weight_norm, "grad_norm": float(grad[lo:hi].norm()),
                         "update_norm": update_norm,
                         "update_ratio": update_norm / weight_norm if weight_norm > 0 else None})
        self.layers = rows

    def report(self, shard: int, version: int, learning_rate: float) -> dict:
        now = time.monotonic()
        started, applied_then = self._window
        if now - started >= 0.5:
            self.updates_per_s = (self.applied - applied_then) / (now - started)
            self._window = (now, self.applied)
        mean_loss = self._loss_sum / self._loss_count if self._loss_count else None
        mean_max_q = self._max_q_sum / self._max_q_count if self._max_q_count else None
        self._loss_sum, self._loss_count, self._max_q_sum, self._max_q_count = 0.0, 0, 0.0, 0
        return {"shard": shard, "pid": os.getpid(), "version": version, "applied": self.applied,
                "updates_per_s": self.updates_per_s,
                "dropped_stale": self.dropped_stale, "rejected": dict(self.rejected),
                "rejected_total": sum(self.rejected.values()),
                "staleness": {str(k): v for k, v in sorted(self.staleness.items())},
                "mean_loss": mean_loss, "mean_max_q": mean_max_q, "learning_rate": learning_rate, "layers": self.layers,
                "time": time.time()}
