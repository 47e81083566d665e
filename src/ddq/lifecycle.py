"""How a run stops: its budgets, the reasons it ends, and the control key every process of a run obeys.

A run is *running* until one of the `StopReason`s holds; then it is
*stopping* (every process finishes what it holds and exits) and finally
*stopped*. Serial mode asks `stop_reason` after each step. A distributed run
shares the decision through Redis: the driver (or a person, with
`SET ddq:RUN:control stop`) writes the control key; shards, workers and the
parameter client read it and finish. Nothing else writes "stop".
"""

from __future__ import annotations

import enum
import time

import redis

from ddq.transport.keys import RunKeys

STOP = b"stop"  # the control key's value that ends a run


class StopReason(str, enum.Enum):
    """Why a run ended; its value is what the summary and the dashboard say."""

    BUDGET = "step budget spent"
    TARGET = "target return reached"
    TIME = "time budget spent"
    USER = "stopped by the user"
    FAILURE = "a process failed"


def is_stop(value: bytes | str | None) -> bool:
    """Whether a control key's raw value (as a pipeline read it) says stop."""
    return value is not None and (value.encode() if isinstance(value, str) else value) == STOP


def time_is_up(time_budget_s: float | None, started_at: float, now: float | None = None) -> bool:
    """The wall-time budget counts from the command's start; None never runs out."""
    return time_budget_s is not None and (time.time() if now is None else now) - started_at >= time_budget_s


def stop_reason(env_steps: int, total_steps: int, target_reached: bool, time_budget_s: float | None,
                started_at: float, now: float | None = None) -> StopReason | None:
    """The reason the run must stop now, or None while it goes on. Every mode asks this one rule."""
    if target_reached:
        return StopReason.TARGET
    if env_steps >= total_steps:
        return StopReason.BUDGET
    if time_is_up(time_budget_s, started_at, now):
        return StopReason.TIME
    return None


class RunControl:
    """A distributed run's control key: the driver stops the run through it, every process reads it."""

    def __init__(self, client: redis.Redis, run: str):
        self.client, self.keys = client, RunKeys(run)

    def stop(self, reason: StopReason) -> None:
        """Asks every process of the run to finish; the first reason given is the one kept."""
        self.client.set(self.keys.stop_reason, reason.value, nx=True)
        self.client.set(self.keys.control, STOP)

    def stopping(self) -> bool:
        return is_stop(self.client.get(self.keys.control))

    def reason(self) -> str | None:
        """Why the run was stopped: a StopReason's value, or "stopped by the user" when a person set the
        control key by hand; None while it runs."""
        if not self.stopping():
            return None
        raw = self.client.get(self.keys.stop_reason)
        if not raw:
            return StopReason.USER.value
        return raw.decode() if isinstance(raw, bytes) else str(raw)
