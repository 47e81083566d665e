"""A worker's keys in Redis (a downpour Barista, or an actor-learner actor), as named operations: the env
steps and episodes it reports with the run's state read back in the same round trip, its row, and the
actor's experience and sync rounds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ddq.transport.control import is_stop
from ddq.transport.keys import RunKeys
from ddq.transport.redis_client import Connection


@dataclass(frozen=True)
class RunState:
    """What a worker reads back each time it reports."""

    env_steps: int  # the run's, all workers together
    stopping: bool  # the control key says stop
    trained_steps: int = 0  # actor-learner: the env steps the learner has trained on
    backlog: int = 0  # actor-learner: experience messages waiting for the learner
    episodes: int = 0  # the run's training episodes ended, all workers together


class WorkerChannel:
    """Worker `worker`'s keys of `run`, through a connection."""

    def __init__(self, client: Connection, run: str, worker: int):
        self.client, self.keys, self.worker = client, RunKeys(run), worker

    def _report(self, pipe: Any, env_steps: int, episodes: list[dict]) -> None:
        pipe.incrby(self.keys.env_steps, env_steps)
        pipe.incrby(self.keys.episode_count, len(episodes))
        for episode in episodes:
            pipe.rpush(self.keys.episodes, json.dumps(episode))
        pipe.get(self.keys.control)

    def report(self, env_steps: int, episodes: list[dict]) -> RunState:
        """Counts `env_steps` more and appends the finished `episodes`, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        self._report(pipe, env_steps, episodes)
        replies = pipe.execute()
        return RunState(int(replies[0]), is_stop(replies[-1]), episodes=int(replies[1]))

    def write_row(self, attempt: int, row: dict) -> None:
        """The worker's latest statistics, one row per attempt (a killed attempt's still count)."""
        self.client.hset(self.keys.workers, f"{self.worker}:{attempt}", json.dumps(row))

    # ---------------------------------------------------------------- actor-learner's actors
    def send_experience(self, message: bytes, env_steps: int, episodes: list[dict]) -> RunState:
        """Queues an experience message for the learner and reports as `report` does, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.lpush(self.keys.experience, message)
        self._report(pipe, env_steps, episodes)
        pipe.get(self.keys.trained_steps)
        backlog, total, episodes_total, *_, control, trained = pipe.execute()
        return RunState(int(total), is_stop(control), int(trained or 0), int(backlog), int(episodes_total))

    def backlog(self) -> tuple[int, bool]:
        """(experience messages waiting for the learner, whether the run is stopping)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.llen(self.keys.experience)
        pipe.get(self.keys.control)
        length, control = pipe.execute()
        return int(length), is_stop(control)

    def round_done(self) -> int:
        """--sync: the last round the learner trained on and published weights for (-1 before the first)."""
        return int(self.client.get(self.keys.round_done) or -1)

    def set_round_ready(self, number: int) -> None:
        """--sync: every actor has sent round `number`."""
        self.client.set(self.keys.round_ready, number)

    def round_state(self) -> tuple[int, RunState]:
        """--sync: (the last round done, or -1, and the run's state without its env steps)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.keys.round_done)
        pipe.get(self.keys.control)
        pipe.get(self.keys.trained_steps)
        done, control, trained = pipe.execute()
        return int(done) if done is not None else -1, RunState(0, is_stop(control), int(trained or 0))
