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
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from ddq.transport.control import ControlKeys
from ddq.transport.redis_client import Connection

# How long the owner of the weights keeps taking what workers send after a stop, waiting for the driver to say
# they finished: longer than Spark takes to end a job whose tasks all saw the stop.
WORKERS_FINISH_WAIT_S = 60.0
HOUSEKEEPING_S = 0.25  # how often a server (a shard, the learner) reports and reads the control key
LOST_REDIS_EXIT = 3  # a server's exit code once it lost the run's Redis for good (its supervisor restarts it)


class StopReason(str, enum.Enum):
    """Why a run ended; its value is what the summary and the dashboard say."""

    BUDGET = "step budget spent"
    EPISODES = "episode budget spent"
    TARGET = "target return reached"
    TIME = "time budget spent"
    USER = "stopped by the user"
    FAILURE = "the run could not go on"


def time_is_up(time_budget_s: float | None, started_at: float, now: float | None = None) -> bool:
    """The wall-time budget counts from the command's start; None never runs out."""
    return time_budget_s is not None and (time.time() if now is None else now) - started_at >= time_budget_s


def budget_spent(env_steps: int | None, total_steps: int, episodes: int, total_episodes: int | None
                 ) -> StopReason | None:
    """The step or episode budget, once spent (`env_steps` None: steps not counted by the caller); else None.
    The workers of a distributed run hold themselves to it, the driver to the rest (`stop_reason`)."""
    if env_steps is not None and env_steps >= total_steps:
        return StopReason.BUDGET
    if total_episodes is not None and episodes >= total_episodes:
        return StopReason.EPISODES
    return None


def stop_reason(env_steps: int | None, total_steps: int, target_reached: bool, time_budget_s: float | None,
                started_at: float, now: float | None = None, user_stopped: bool = False, episodes: int = 0,
                total_episodes: int | None = None) -> StopReason | None:
    """The reason the run must stop now, or None while it goes on. Every mode asks this one rule.

    `env_steps` None: the step budget is not the caller's to judge (downpour's workers stop at it
    themselves, once their last gradients are pushed). `episodes`: training episodes ended so far, against
    the episode budget `total_episodes` (None: none)."""
    if user_stopped:
        return StopReason.USER
    if target_reached:
        return StopReason.TARGET
    if (spent := budget_spent(env_steps, total_steps, episodes, total_episodes)) is not None:
        return spent
    if time_is_up(time_budget_s, started_at, now):
        return StopReason.TIME
    return None


class RunControl:
    """A distributed run's control key: the driver stops the run through it, every process reads it."""

    def __init__(self, client: Connection, run: str):
        self.keys = ControlKeys(client, run)

    def stop(self, reason: StopReason) -> None:
        """Asks every process of the run to finish; the first reason given is the one kept (a control key
        a person set by hand, with no reason beside it, counts as stopped by the user)."""
        if self.stopping():
            self.keys.keep_reason(StopReason.USER.value)
            return
        self.keys.keep_reason(reason.value)
        self.keys.set_stop()

    def stopping(self) -> bool:
        return self.keys.says_stop()

    def mark_workers_finished(self) -> None:
        """The driver's word, once its Spark job ended: no worker sends anything any more."""
        self.keys.set_workers_finished()

    def serve_until_workers_finished(self, serve: Callable[[], Any], timeout: float = WORKERS_FINISH_WAIT_S) -> None:
        """Calls `serve` (a short round of taking what workers send) until the driver said the workers
        finished, or for `timeout` seconds: a stopped run's workers may still send what they had under way,
        and the owner of the weights applies it before its final snapshot."""
        deadline = time.monotonic() + timeout
        while not self.keys.workers_finished() and time.monotonic() < deadline:
            serve()

    def reason(self) -> str | None:
        """Why the run was stopped: a StopReason's value, or "stopped by the user" when a person set the
        control key by hand; None while it runs."""
        if not self.stopping():
            return None
        return self.keys.reason() or StopReason.USER.value


def serve_until_stopped(work: Callable[[], object], housekeeping: Callable[[], bool]) -> None:
    """A server's loop: `work` (which waits at most HOUSEKEEPING_S), with `housekeeping` every HOUSEKEEPING_S
    (its report, and whether the run goes on) until it says the run stopped."""
    next_housekeeping = time.monotonic() + HOUSEKEEPING_S
    while True:
        work()
        if time.monotonic() >= next_housekeeping:
            if not housekeeping():
                return
            next_housekeeping = time.monotonic() + HOUSEKEEPING_S


class StopSignals:
    """While active (a `with` block in the main thread): the first SIGINT (Ctrl-C), SIGTERM or SIGHUP (its
    terminal closed) asks the run to stop the way a reached target does, and is only recorded here
    (`received`) for the run's loop to act on; a second one aborts at once (KeyboardInterrupt). A signal
    the process was started to ignore (`nohup` ignores SIGHUP) stays ignored. Other threads: does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: str | None = None  # SIGINT, SIGTERM or SIGHUP, once one came
        self._previous: dict[int, Any] = {}

    def _handle(self, number: int, _frame: FrameType | None) -> None:
        if self.received is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(number).name}: aborting")
        self.received = signal.Signals(number).name
        line_break = "\n" if sys.stderr.isatty() else ""  # off the progress bar's line (and the terminal's ^C)
        print(f"{line_break}ddq: {self.received} received: stopping the run cleanly (again to abort at once)",
              file=sys.stderr, flush=True)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._handle) for number in self.SIGNALS
                              if signal.getsignal(number) != signal.SIG_IGN}
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
            outer = getattr(handler, "__self__", None)  # a window around this one: a signal here was its first
            if isinstance(outer, StopSignals) and outer.received is None:
                outer.received = self.received

    def exit_code(self) -> int:
        """The shell's convention for a process ended by the signal received (128 + its number)."""
        return 128 + int(signal.Signals[self.received]) if self.received else 0
