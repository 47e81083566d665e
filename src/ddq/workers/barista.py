"""A Barista: one worker of downpour training, with its own games, replay memory and Q-network.

Its loop, as in DistBelief's Downpour SGD: play a vector step epsilon-greedily
(epsilon follows the run's global env-step count, kept in Redis and read
back with each report, every REPORT_S: see
`ddq.core.dqn.linearly_decaying_epsilon`), store the transitions, and at the
replay ratio compute minibatch gradients against the weights last synced and
push them to its parameter source (`ddq.core.weights`), syncing again
whenever the weights moved. The source is handed in: the parameter server's
overlapped client in downpour, the all-reduce in data-parallel, the
learner's own optimizer elsewhere; the Barista cannot tell. It owns only
what it can rebuild.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ddq.config import TrainConfig
from ddq.core.agent import build_agent, importance_beta
from ddq.core.learner import Learner
from ddq.core.weights import ParameterSource
from ddq.lifecycle import budget_spent
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.worker_channel import WorkerChannel

# Builds a worker's parameter source around its learner (whose flat weights and target it keeps current).
SourceFactory = Callable[[Learner], ParameterSource]

WORKER_SEED_STRIDE = 10_007
HEARTBEAT_S = 1.0
# Seconds between a worker's reports to the run's Redis (its steps and episodes; the run's state back): a
# round trip each, which every vector step would cost as much as a small network's update, and several times
# that across a network. The run's end reaches a worker this much later at most.
REPORT_S = 0.25


@dataclass
class WorkerStats:
    worker: int
    attempt: int
    env_steps: int = 0
    pushes: int = 0
    gradients: int = 0  # computed: downpour merges those computed while a push is on the wire into one push
    episodes: int = 0
    backlog_waits: int = 0
    wall_time_s: float = 0.0  # playing and learning, as of its last heartbeat
    state: str = "starting"
    heartbeat: float = 0.0
    pid: int = 0
    # over the last heartbeat interval, for the dashboard; once finished, over the whole attempt (StatsWindow)
    env_steps_per_s: float = 0.0
    pushes_per_s: float = 0.0
    loss: float | None = None
    mean_max_q: float | None = None
    epsilon: float = 1.0
    weights_version: int = 0  # of the weights it acts with
    started_from: int = 0  # the weights version this attempt began with (data-parallel: its stage's snapshot)
    rounds: int = 0  # actor-learner --sync: rounds played and trained on
    # actor-learner --sync: [round, weights version it was played with] of the newest two rounds begun
    round_weights: list[list[int]] = field(default_factory=list)
    # data-parallel: seconds in the stage's all-reduces and broadcasts, waiting there for slower workers included
    collective_s: float = 0.0


class StatsWindow:
    """Rates and means since the last heartbeat: what a person watching the run wants, not totals."""

    def __init__(self) -> None:
        self.started, self.env_steps, self.pushes = time.monotonic(), 0, 0
        self.loss_sum, self.max_q_sum, self.gradients, self.max_q_readings = 0.0, 0.0, 0, 0

    def add_gradient(self, loss: float, mean_max_q: float | None) -> None:
        """One gradient's loss, and its mean max-Q when the learner measured it."""
        self.loss_sum += loss
        self.gradients += 1
        if mean_max_q is not None:
            self.max_q_sum += mean_max_q
            self.max_q_readings += 1

    def close(self, stats: WorkerStats) -> StatsWindow:
        """Writes the window's rates and means into `stats`; returns the next window. A finished worker's
        rates are its whole attempt's: its last window can be a few milliseconds and one rollout (a
        data-parallel Breakout worker's summary said 69,548 env steps a second of a run at 15,900)."""
        if stats.state == "finished" and stats.wall_time_s > 0:
            stats.env_steps_per_s = stats.env_steps / stats.wall_time_s
            stats.pushes_per_s = stats.pushes / stats.wall_time_s
        else:
            seconds = max(time.monotonic() - self.started, 1e-9)
            stats.env_steps_per_s = (stats.env_steps - self.env_steps) / seconds
            stats.pushes_per_s = (stats.pushes - self.pushes) / seconds
        if self.gradients:
            stats.loss = self.loss_sum / self.gradients
        if self.max_q_readings:  # else the last window's value stands: the learner reads it every 8th gradient
            stats.mean_max_q = self.max_q_sum / self.max_q_readings
        following = StatsWindow()
        following.env_steps, following.pushes = stats.env_steps, stats.pushes
        return following


class Barista:
    """One worker: its envs, replay memory and learner, reporting to the run's Redis keys, training
    through whatever parameter source `connect` builds."""

    def __init__(self, config: TrainConfig, redis_url: str, run: str, worker: int, connect: SourceFactory,
                 attempt: int = 0):
        self.config, self.worker = config, worker
        seed = config.agent.seed + WORKER_SEED_STRIDE * (worker + 1) + 101 * attempt
        agent = build_agent(config.agent, seed, config.run.total_steps)
        self.device, self.learner, self.replay, self.actor = agent.device, agent.learner, agent.replay, agent.actor
        self.rng, self.epsilon, self.agent = agent.rng, agent.epsilon, agent  # epsilon: by global steps
        self.source = connect(self.learner)
        self.actor.reset(seed=seed)
        self.channel = WorkerChannel(connect_redis(redis_url), run, worker)
        self.stats = WorkerStats(worker, attempt, pid=os.getpid())
        self.window = StatsWindow()
        self.global_steps = 0
        self.run_episodes = 0  # the run's training episodes, all workers', as of the last report
        self.stopped = False  # the run's control key said stop
        self.unreported_steps, self.unreported_episodes = 0, list[dict]()  # since the last report
        self.next_report = 0.0  # time.monotonic() of the next report
        self.reported_at: float | None = None  # time.monotonic() of the last report
        self.run_steps_seen = 0  # the run's env steps as of then
        self.others_rate = 0.0  # env steps a second the other workers played between this one's last two reports
        self.others_episode_rate = 0.0  # and the episodes they ended a second
        self.stepping_together = 1  # workers known to step with this one between reports (data-parallel: all)

    def play(self) -> int:
        """One vector step; its steps and the episodes it finished go to the run's Redis every REPORT_S.
        Meanwhile the run's env steps are counted on by the workers stepping with this one. New env steps."""
        new_steps, episodes = self.act()
        self.unreported_steps += new_steps
        self.unreported_episodes += episodes
        self.global_steps += new_steps * self.stepping_together
        now = time.monotonic()
        if now >= self.next_report or self.nearing_budget(now):
            self.report_unreported()
        return new_steps

    def nearing_budget(self, now: float) -> bool:
        """Whether the other workers (those not known to step with this one) may have brought the run's env
        steps to the step budget since this one's last report, had they played twice as fast as they were
        seen to, or each twice as many steps as this one did meanwhile (before their rate is known); or its
        episodes to the episode budget, alike. Near the end each worker then reports every few vector steps,
        and the run stops close to its budget, where each had played on for a report interval (a 4,000-step
        PQN downpour run on CartPole-v1 played 5,707-6,783 env steps; a 20,000-step one 21,983-22,853; one of
        200 episodes ended 511-941, the driver stopping it)."""
        others = self.config.distributed.workers - self.stepping_together
        if others == 0:  # data-parallel's: it counts every worker's steps itself
            return False
        elapsed, budget = 0.0 if self.reported_at is None else now - self.reported_at, self.config.run
        unseen = max(self.unreported_steps * others, self.others_rate * elapsed)
        unseen_episodes = max(len(self.unreported_episodes) * others, self.others_episode_rate * elapsed)
        return budget_spent(self.global_steps + 2 * int(unseen), budget.total_steps,
                            self.run_episodes + 2 * int(unseen_episodes), budget.total_episodes) is not None

    def act(self) -> tuple[int, list[dict]]:
        """One vector step: its env steps, and the episodes it finished, stamped for the run's episode list."""
        before = self.actor.env_steps
        self.stats.epsilon = self.epsilon(self.global_steps)
        episodes = self.actor.step(self.learner.online, self.stats.epsilon)
        new_steps = self.actor.env_steps - before
        self.stats.episodes += len(episodes)
        if not episodes:  # most vector steps finish none: nothing to stamp
            return new_steps, []
        stamp = {"worker": self.worker, "time": time.time(), "env_steps": self.global_steps + new_steps}
        return new_steps, [{**stamp, **asdict(episode)} for episode in episodes]

    def report_unreported(self) -> None:
        """Counts the steps and episodes played since the last report in the run's Redis and reads the run's
        state back, in one round trip."""
        run = self.channel.report(self.unreported_steps, self.unreported_episodes)
        now = time.monotonic()
        others = run.env_steps - self.run_steps_seen - self.unreported_steps
        others_episodes = run.episodes - self.run_episodes - len(self.unreported_episodes)
        if self.reported_at is not None and now > self.reported_at:
            self.others_rate = max(others, 0) / (now - self.reported_at)
            self.others_episode_rate = max(others_episodes, 0) / (now - self.reported_at)
        self.reported_at, self.run_steps_seen = now, run.env_steps
        self.unreported_steps, self.unreported_episodes = 0, []
        self.next_report = now + REPORT_S
        self.global_steps, self.run_episodes, self.stopped = run.env_steps, run.episodes, run.stopping

    def learn(self, new_steps: int) -> None:
        beta = importance_beta(self.config.agent, self.global_steps, self.config.run.total_steps)
        for stats in self.agent.train(self.source, new_steps, beta):
            self.window.add_gradient(stats.loss, stats.mean_max_q)
            self.stats.gradients += 1

    def heartbeat(self, state: str) -> None:
        self.report_unreported()  # what it played so far counts in the run's, and its row says as much
        self.stats.state, self.stats.heartbeat = state, time.time()
        self.stats.env_steps, self.stats.backlog_waits = self.actor.env_steps, self.source.waits
        self.stats.pushes = self.source.pushes  # what left the worker: gradients merged into one push count once
        self.stats.weights_version = self.source.version
        self.window = self.window.close(self.stats)
        # one row per attempt: a killed attempt's steps and pushes still count once Spark retried it
        self.channel.write_row(self.stats.attempt, asdict(self.stats))

    def finished(self) -> bool:
        """The run's step or episode budget spent, as this worker last counted the run's, or the run stopped."""
        budget = self.config.run
        return self.stopped or budget_spent(self.global_steps, budget.total_steps, self.run_episodes,
                                            budget.total_episodes) is not None

    def advance(self, env_steps: int | None = None) -> WorkerStats:
        """Plays and learns for `env_steps` more steps of its own (None: until the run's global budget
        is spent), stopping early if the run is stopped; heartbeats as it goes."""
        started, goal = time.time(), None if env_steps is None else self.actor.env_steps + env_steps
        spent_before = self.stats.wall_time_s

        def clock() -> None:  # the row's wall time as of now, so that shares of it read right while it runs
            self.stats.wall_time_s = spent_before + time.time() - started

        self.source.sync()
        self.heartbeat("running")
        next_beat = time.monotonic() + HEARTBEAT_S
        while not self.finished() and (goal is None or self.actor.env_steps < goal):
            self.learn(self.play())
            if time.monotonic() >= next_beat:
                clock()
                self.heartbeat("running")
                next_beat = time.monotonic() + HEARTBEAT_S
        clock()
        done = self.finished()
        if done:  # the source sends what it still holds (an overlapped push), so the last row counts it
            self.source.close()
        self.heartbeat("finished" if done else "idle")
        return self.stats

    def close(self) -> None:
        self.source.close()
        self.actor.envs.close()

    def run(self) -> WorkerStats:
        """Plays and learns until the run's global step budget is spent or the run is stopped."""
        try:
            return self.advance()
        finally:
            self.close()
