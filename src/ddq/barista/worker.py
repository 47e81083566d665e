"""A Barista: one worker of downpour training, with its own games, replay memory and Q-network.

Its loop, as in DistBelief's Downpour SGD: play a vector step epsilon-greedily
(epsilon follows the run's global env-step count, kept in Redis), store the
transitions, and at the replay ratio compute minibatch gradients against the
weights last pulled and push them with that version; pull again whenever the
server's version moved. The parameter server owns the weights and the
optimizer; a Barista owns only what it can rebuild.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import redis

from ddq.actor import Actor
from ddq.config import TrainConfig
from ddq.gamesim.envs import make_vector_env
from ddq.param_server.client import ParameterClient
from ddq.param_server.protocol import RunKeys
from ddq.parts import (env_shapes, epsilon_schedule, make_learner, make_replay, resolve_device, seed_everything,
                       update_schedule)

WORKER_SEED_STRIDE = 10_007
HEARTBEAT_S = 1.0


@dataclass
class WorkerStats:
    worker: int
    attempt: int
    env_steps: int = 0
    pushes: int = 0
    episodes: int = 0
    backlog_waits: int = 0
    wall_time_s: float = 0.0
    state: str = "starting"
    heartbeat: float = 0.0
    pid: int = 0
    # over the last heartbeat interval, for the dashboard
    env_steps_per_s: float = 0.0
    pushes_per_s: float = 0.0
    loss: float | None = None
    mean_max_q: float | None = None
    epsilon: float = 1.0


class StatsWindow:
    """Rates and means since the last heartbeat: what a person watching the run wants, not totals."""

    def __init__(self) -> None:
        self.started, self.env_steps, self.pushes = time.monotonic(), 0, 0
        self.loss_sum, self.max_q_sum, self.gradients = 0.0, 0.0, 0

    def add_gradient(self, loss: float, mean_max_q: float) -> None:
        self.loss_sum += loss
        self.max_q_sum += mean_max_q
        self.gradients += 1

    def close(self, stats: WorkerStats) -> StatsWindow:
        """Writes the window's rates and means into `stats`; returns the next window."""
        seconds = max(time.monotonic() - self.started, 1e-9)
        stats.env_steps_per_s = (stats.env_steps - self.env_steps) / seconds
        stats.pushes_per_s = (stats.pushes - self.pushes) / seconds
        if self.gradients:
            stats.loss, stats.mean_max_q = self.loss_sum / self.gradients, self.max_q_sum / self.gradients
        following = StatsWindow()
        following.env_steps, following.pushes = stats.env_steps, stats.pushes
        return following


class Barista:
    def __init__(self, config: TrainConfig, redis_url: str, run: str, worker: int, attempt: int = 0):
        self.config, self.worker = config, worker
        seed = config.seed + WORKER_SEED_STRIDE * (worker + 1) + 101 * attempt
        seed_everything(seed, config.threads)
        self.device = resolve_device(config.device)
        frame_shape, dtype, num_actions = env_shapes(config)
        self.learner = make_learner(config, frame_shape, num_actions, self.device)
        self.client = ParameterClient(redis_url, run, self.learner.flat, config.server.shards, worker,
                                      target=self.learner.target_flat, max_backlog=config.server.max_backlog)
        self.replay = make_replay(config, frame_shape, dtype, seed)
        self.rng = np.random.default_rng(seed)
        self.actor = Actor(make_vector_env(config.env, config.num_envs, config.env_options), self.replay,
                           config.frame_stack, self.rng, self.device)
        self.actor.reset(seed=seed)
        self.epsilon = epsilon_schedule(config)
        self.schedule = update_schedule(config)
        self.redis = redis.Redis.from_url(redis_url)
        self.keys = RunKeys(run)
        self.stats = WorkerStats(worker, attempt, pid=os.getpid())
        self.window = StatsWindow()
        self.global_steps = 0
        self.stopped = False  # the run's control key said stop

    def sync(self) -> None:
        """Fetch whatever moved on the server: weights, and the target every C updates."""
        self.client.sync()

    def play(self) -> int:
        """One vector step; the episodes it finished go to the run's episode list. New env steps."""
        before = self.actor.env_steps
        self.stats.epsilon = self.epsilon(self.global_steps)
        episodes = self.actor.step(self.learner.online, self.stats.epsilon)
        new_steps = self.actor.env_steps - before
        pipe = self.redis.pipeline(transaction=False)  # one round trip per vector step
        pipe.incrby(self.keys.env_steps, new_steps)
        if episodes:  # most vector steps finish none: nothing to stamp
            stamp = {"worker": self.worker, "time": time.time(), "env_steps": self.global_steps + new_steps}
        for episode in episodes:
            pipe.rpush(self.keys.episodes, json.dumps({**stamp, **asdict(episode)}))
        pipe.get(self.keys.control)
        replies = pipe.execute()
        self.global_steps, self.stopped = replies[0], replies[-1] == b"stop"
        self.stats.episodes += len(episodes)
        return new_steps

    def learn(self, new_steps: int) -> None:
        for _ in range(self.schedule.due(new_steps, self.actor.env_steps)):
            stats = self.learner.compute_gradient(self.replay.sample(self.config.batch_size))
            self.client.push(self.learner.flat.grad.cpu().numpy(), samples=self.config.batch_size, loss=stats.loss)
            self.stats.pushes += 1
            self.window.add_gradient(stats.loss, stats.mean_max_q)
            self.sync()

    def heartbeat(self, state: str) -> None:
        self.stats.state, self.stats.heartbeat = state, time.time()
        self.stats.env_steps, self.stats.backlog_waits = self.actor.env_steps, self.client.waits
        self.window = self.window.close(self.stats)
        self.redis.hset(self.keys.workers, str(self.worker), json.dumps(asdict(self.stats)))

    def finished(self) -> bool:
        return self.global_steps >= self.config.total_steps or self.stopped

    def advance(self, env_steps: int | None = None) -> WorkerStats:
        """Plays and learns for `env_steps` more steps of its own (None: until the run's global budget
        is spent), stopping early if the run is stopped; heartbeats as it goes."""
        started, goal = time.time(), None if env_steps is None else self.actor.env_steps + env_steps
        self.sync()
        self.heartbeat("running")
        next_beat = time.monotonic() + HEARTBEAT_S
        while not self.finished() and (goal is None or self.actor.env_steps < goal):
            self.learn(self.play())
            if time.monotonic() >= next_beat:
                self.heartbeat("running")
                next_beat = time.monotonic() + HEARTBEAT_S
        self.stats.wall_time_s += time.time() - started
        self.heartbeat("finished" if self.finished() else "idle")
        return self.stats

    def close(self) -> None:
        self.client.close()
        self.actor.envs.close()

    def run(self) -> WorkerStats:
        """Plays and learns until the run's global step budget is spent or the run is stopped."""
        try:
            return self.advance()
        finally:
            self.close()
