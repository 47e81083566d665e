"""An actor of actor-learner training: a worker that only plays, sending its experience to the central learner.

Its loop: play a vector step epsilon-greedily with the newest weights it has,
keep the step in its outbox, and every `send_every` steps send the outbox to
the run's experience list (`ddq.transport.experience`) together with its env
steps and finished episodes, then pull the weights if the learner published
newer ones. It keeps no replay memory and computes no gradients. Epsilon
follows the env steps the learner has trained on (one schedule for every
actor), or is Ape-X's fixed per-actor value (`per_actor_epsilon`). With
prioritized replay it also sends each transition's initial priority, the TD
error of the Q-values it acted on, n-step with `n_step` (as Ape-X's actors do).
"""

from __future__ import annotations

import os
import secrets
import time
import typing
from collections.abc import Callable
from dataclasses import asdict
from typing import Protocol

import numpy as np
import torch
from torch import nn

from ddq.config import TrainConfig
from ddq.core.actor import Actor, Episode
from ddq.core.agent import env_spec, epsilon_schedule, q_network, seed_everything
from ddq.core.dqn import n_step_returns, per_actor_epsilon
from ddq.core.prioritized import initial_td_errors
from ddq.core.weights import WeightsSource
from ddq.gamesim.envs import make_vector_env
from ddq.lifecycle import budget_spent
from ddq.models import FlatParameters
from ddq.transport.experience import Experience, encode
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.worker_channel import WorkerChannel
from ddq.workers.barista import HEARTBEAT_S, WORKER_SEED_STRIDE, StatsWindow, WorkerStats

# Builds an actor's weights source around its network's flat parameters (kept current by `sync`).
WeightsFactory = Callable[[FlatParameters], WeightsSource]


class Meeting(Protocol):
    """--sync: where the actors meet between rounds. Each call returns once every actor made it (the
    barrier stage's process group: `ddq.transport.collective.Collective`)."""

    def highest(self, number: int) -> int:
        """The highest of the actors' `number`s."""

    def any(self, flag: bool) -> bool:
        """Whether any actor's `flag` is True."""


BACKLOG_DEADLINE_S = 120.0  # an actor waiting for the learner to take its messages gives up after this


class Outbox:
    """An actor's vector steps since it last sent, as its replay memory would record them; with `gamma`, it
    also settles each transition's initial TD error, over `n_step` steps as the learner's targets are, once
    the Q-values of the state it bootstraps from are known (n vector steps later)."""

    def __init__(self, gamma: float | None, n_step: int = 1):
        self.gamma, self.n_step = gamma, n_step
        self.rows: list[tuple] = []  # (frames, actions, rewards, terminated, continues)
        # Q(s, .) of the state each row's transition leaves (the row before it; None for the very first row),
        # kept for every row not yet sent: row j's error needs those of rows j to j + n
        self.q_before: list[np.ndarray | None] = []
        self.td_errors: list[np.ndarray] = []  # one per settled row

    def start(self, frames: np.ndarray) -> None:
        self.add(frames, None, None, None, np.zeros(len(frames), dtype=bool))
        self.q_before.append(None)  # episodes start here: no transition to settle

    def add(self, frames: np.ndarray, actions: np.ndarray | None, rewards: np.ndarray | None,
            terminated: np.ndarray | None, continues: np.ndarray) -> None:
        streams = len(frames)
        self.rows.append((np.array(frames), np.zeros(streams, np.int64) if actions is None else np.array(actions),
                          np.zeros(streams, np.float32) if rewards is None else np.array(rewards, np.float32),
                          np.zeros(streams, bool) if terminated is None else np.array(terminated, bool),
                          np.array(continues, bool)))

    def settle(self, q_values: np.ndarray) -> None:
        """After a step: `q_values` are Q(s_t, .) the actor acted on, the state the newest row's transition
        left. Settles every transition whose n-step window's bootstrap state has its values now."""
        if self.gamma is None:
            return
        self.q_before.append(q_values)
        while len(self.td_errors) + self.n_step < len(self.q_before):
            self.td_errors.append(self._td_error(len(self.td_errors)))

    def _td_error(self, j: int) -> np.ndarray:
        """Row j's transition's initial TD error, over the n rows from j as `ReplayMemory.gather` reads them
        (-1 where it is not a transition: an episode's first frame)."""
        assert self.gamma is not None
        continues = self.rows[j][4]
        q_now = self.q_before[j]
        if q_now is None:
            return np.full(len(continues), -1.0, np.float32)
        window = self.rows[j:j + self.n_step]
        available = np.stack([row[4] for row in window], axis=1)
        returns, steps, ended = n_step_returns(np.stack([row[2] for row in window], axis=1),
                                               np.stack([row[3] for row in window], axis=1) & available,
                                               available, self.gamma)
        later = self.q_before[j + 1:j + 1 + self.n_step]
        assert all(q is not None for q in later)  # only the very first row has no state before it
        ahead = np.stack(typing.cast(list[np.ndarray], later))  # ahead[m - 1]: Q(s_{t+m}, .)
        q_next = ahead[steps - 1, np.arange(len(steps))]
        errors = initial_td_errors(q_now, self.rows[j][1], returns, ended, q_next, self.gamma ** steps)
        return np.where(continues, errors, -1.0).astype(np.float32)

    def take(self, everything: bool = False) -> tuple[tuple, np.ndarray | None] | None:
        """The rows whose TD errors are settled (all of them when `everything`, unknown ones -1), as stacked
        arrays, leaving the rest; None when there are none."""
        ready = len(self.rows) if everything or self.gamma is None else len(self.td_errors)
        if ready == 0:
            return None
        rows, self.rows = self.rows[:ready], self.rows[ready:]
        self.q_before = self.q_before[ready:]
        td = None
        if self.gamma is not None:
            settled, self.td_errors = self.td_errors[:ready], self.td_errors[ready:]
            settled += [np.full(len(rows[0][0]), -1.0, np.float32)] * (ready - len(settled))
            td = np.stack(settled)
        return tuple(np.stack(column) for column in zip(*rows)), td

    def __len__(self) -> int:
        return len(self.rows)


class ExperienceActor:
    """One actor: its envs and a copy of the online network, sending to the run's experience list."""

    def __init__(self, config: TrainConfig, redis_url: str, run: str, actor: int, connect: WeightsFactory,
                 attempt: int = 0, meet: Meeting | None = None):
        """`meet`: the barrier of --sync rounds (required then)."""
        self.config, self.run_id, self.index = config, run, actor
        seed = config.agent.seed + WORKER_SEED_STRIDE * (actor + 1) + 101 * attempt
        seed_everything(seed, config.agent.threads)
        self.device = torch.device("cpu")  # acting is small batches of inference; --device is the learner's
        spec = env_spec(config.agent)
        self.network: nn.Module = q_network(config.agent, spec.frame_shape, spec.num_actions).to(self.device)
        self.flat = FlatParameters(self.network)
        self.source = connect(self.flat)
        self.outbox = Outbox(config.agent.gamma if config.agent.prioritized else None, config.agent.n_step)
        agent = config.agent
        envs = make_vector_env(agent.env, agent.num_envs, agent.env_options)
        self.actor = Actor(envs, self.outbox, agent.frame_stack, np.random.default_rng(seed), self.device)
        self.actor.reset(seed=seed)
        self.schedule = epsilon_schedule(config.agent)
        self.channel = WorkerChannel(connect_redis(redis_url), run, actor)
        self.stats = WorkerStats(actor, attempt, pid=os.getpid())
        self.window = StatsWindow()
        # drawn at random: the learner must see a new sender each time an actor starts, whatever number its
        # attempt has (Spark's, or the driver's start of a barrier stage)
        self.sender = secrets.randbits(32)
        self.sequence = 0  # of the next message: the learner spots a lost one by the gap
        self.episodes: list[Episode] = []  # finished since the last send
        self.global_steps, self.trained_steps, self.sent_steps = 0, 0, 0
        self.run_episodes = 0  # the run's training episodes, all actors', as of the last send
        self.stopped = False
        # a short queue keeps acting close to learning: with one actor, a backlog of 8 messages per actor needs
        # about twice serial's env steps to reach CartPole's 475, a backlog of 1 about as many as serial
        self.backlog_limit = config.distributed.actor_backlog * config.distributed.workers
        if config.distributed.sync and meet is None:
            raise ValueError("sync rounds need a meeting (a Spark barrier stage's process group)")
        self.meet = meet

    def epsilon(self) -> float:
        if self.config.distributed.per_actor_epsilon:
            return per_actor_epsilon(self.index, self.config.distributed.workers)
        return self.schedule(self.trained_steps)

    def send(self, everything: bool = False) -> None:
        """Sends the settled steps with their env steps and episodes in one round trip; waits while the
        learner is far behind (its list is long), rechecking the run's state."""
        taken = self.outbox.take(everything)
        if taken is None:
            return
        (frames, actions, rewards, terminated, continues), td = taken
        experience = Experience(self.index, self.sender, self.sequence, frames, actions, rewards,
                                terminated, continues, td, self.source.version, self.stats.epsilon)
        self.sequence += 1
        new_steps = experience.env_steps
        stamp = {"worker": self.index, "time": time.time()}
        run = self.channel.send_experience(encode(self.run_id, experience), new_steps,
                                           [{**stamp, "env_steps": self.global_steps, **asdict(episode)}
                                            for episode in self.episodes])
        self.global_steps, self.run_episodes = run.env_steps, run.episodes
        self.stats.episodes += len(self.episodes)
        self.episodes, self.stopped = [], run.stopping
        self.trained_steps, self.sent_steps = run.trained_steps, self.sent_steps + new_steps
        self.stats.pushes += 1
        self._wait_for_learner(run.backlog)

    def _wait_for_learner(self, length: int) -> None:
        started = time.monotonic()
        while length > self.backlog_limit and not self.stopped:
            self.stats.backlog_waits += 1
            time.sleep(0.002 if time.monotonic() - started < 1.0 else 0.02)
            length, self.stopped = self.channel.backlog()
            if time.monotonic() - started > BACKLOG_DEADLINE_S:
                raise RuntimeError(f"the learner took no experience for {BACKLOG_DEADLINE_S:.0f} s "
                                   "(is it running?)")

    def heartbeat(self, state: str) -> None:
        self.stats.state, self.stats.heartbeat = state, time.time()
        self.stats.env_steps, self.stats.weights_version = self.sent_steps, self.source.version
        self.window = self.window.close(self.stats)
        self.channel.write_row(self.stats.attempt, asdict(self.stats))

    def finished(self) -> bool:
        """The run's step or episode budget spent, as this actor last counted the run's, or the run stopped."""
        budget = self.config.run
        return self.stopped or budget_spent(self.global_steps, budget.total_steps, self.run_episodes,
                                            budget.total_episodes) is not None

    def run(self) -> WorkerStats:
        """Plays and sends until the run's global step budget is spent or the run is stopped."""
        started = time.time()
        try:
            self.source.sync()
            self.heartbeat("running")
            if self.config.distributed.sync:
                self._play_in_rounds()
            else:
                self._play(rounds=False)
            if not self.stopped:
                self.send(everything=True)
            self.stats.wall_time_s += time.time() - started
            self.heartbeat("finished")
            return self.stats
        finally:
            self.actor.envs.close()

    def _play(self, rounds: bool) -> None:
        """Steps, sending every `send_every` vector steps, until the run is finished, or (`rounds`) until
        this actor finished `sync_every` episodes."""
        next_beat, steps_since_send, episodes = time.monotonic() + HEARTBEAT_S, 0, 0
        while not self.finished() and not (rounds and episodes >= self.config.distributed.sync_every):
            self.stats.epsilon = self.epsilon()
            finished = self.actor.step(self.network, self.stats.epsilon)
            self.episodes += finished
            episodes += len(finished)
            assert self.actor.q_values is not None
            self.outbox.settle(self.actor.q_values)
            steps_since_send += 1
            if steps_since_send >= self.config.distributed.send_every:
                self.send()
                if not rounds:  # in rounds, weights change only between rounds
                    self.source.sync()
                steps_since_send = 0
            if time.monotonic() >= next_beat:
                self.heartbeat("running")
                next_beat = time.monotonic() + HEARTBEAT_S

    def _play_in_rounds(self) -> None:
        """The collective variant: play a round, send all of it, meet every other actor at the barrier, let the
        learner train on the round, start the next with the same new weights. Whether to go on is decided
        together at the barrier, so that no actor waits there for one that left."""
        assert self.meet is not None
        done_before = self.channel.round_done()
        number = self.meet.highest(done_before + 1)  # a retried stage agrees where it is
        while True:
            if not self.finished():  # the weights this round is played with, for the record
                self.stats.round_weights = [*self.stats.round_weights[-1:], [number, self.source.version]]
            self._play(rounds=True)
            self.send(everything=True)
            if self.meet.any(self.finished()):
                return
            if self.index == 0:
                self.channel.set_round_ready(number)
            # stopped before the round's weights came, an actor keeps its own and plays no more; it still goes
            # on to the next barrier, where whoever saw the new weights first meets it to stop
            if self._wait_for_round(number):
                self.source.sync()
            self.stats.rounds += 1
            number += 1

    def _wait_for_round(self, number: int) -> bool:
        """Until the learner has trained on round `number` and published its weights: True, or False once the
        run stopped first."""
        started = time.monotonic()
        while not self.stopped:
            done, run = self.channel.round_state()
            self.stopped, self.trained_steps = run.stopping, run.trained_steps
            if done >= number:
                return True
            if time.monotonic() - started > BACKLOG_DEADLINE_S:
                raise RuntimeError(f"the learner finished no round for {BACKLOG_DEADLINE_S:.0f} s (is it running?)")
            time.sleep(0.005)
        return False
