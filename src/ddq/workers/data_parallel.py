"""A data-parallel worker: a Barista whose every gradient is averaged with all the others' before each of
them applies it (torch.distributed's all-reduce), so every worker holds the same weights and none is stale.

The synchronous data parallelism of DD-PPO (Wijmans et al. 2020) and PQN:
each worker plays its own envs and computes its algorithm's gradient on
what it collected (PQN's fresh rollouts, DQN's own replay memory); the mean
over N workers is the gradient of one serial learner with N times the envs.
The workers also agree, every few vector steps, on whether the run is over,
so that all leave their loop at the same step and none waits on a collective
the others left. Rank 0 publishes for the driver: the weights every
`publish_every` updates, the weights at each `eval_every` mark of the run's
env steps (the driver evaluates them), and a snapshot with the optimizer's
state every `snapshot_every` updates, which a restarted stage starts from.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from ddq.config import TrainConfig
from ddq.core.agent import update_schedule
from ddq.core.dqn import last_target_refresh, next_mark
from ddq.core.learner import Learner
from ddq.core.weights import LocalParameters
from ddq.transport.collective import Collective
from ddq.transport.learner_channel import LearnerChannel
from ddq.transport.redis_client import StoreError
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.server_metrics import ServerMetrics, layer_segments
from ddq.transport.snapshots import ShardState
from ddq.transport.weights_publisher import WeightsPublisher, weights_messages
from ddq.transport.wire import layout_bytes
from ddq.workers.barista import Barista

REPORT_EVERY_S = 1.0  # rank 0's report of the updates, as a shard's housekeeping writes its own
AGREE_EVERY = 16  # vector steps between the workers' votes (on stopping; they count the run's steps): one all-reduce
CollectiveFactory = Callable[[torch.device], Collective]  # joins the stage's group, for a learner on a device


class AveragedGradients(LocalParameters):
    """The parameter source of a data-parallel worker: a pushed gradient is averaged over the workers, then
    applied by the learner's own optimizer, as serial training's `LocalParameters` applies its own. Every
    worker applies the same mean, so `sync` has nothing to fetch; a push waits on the slowest worker.
    `metrics` (rank 0's): what each update did, for the dashboard, as a parameter server's shard counts it."""

    def __init__(self, learner: Learner, collective: Collective, metrics: ServerMetrics | None = None):
        super().__init__(learner)
        self.collective, self.metrics = collective, metrics

    def push(self, grad: torch.Tensor | np.ndarray, samples: int = 0, loss: float = 0.0) -> None:
        flat, metrics = self.learner.flat, self.metrics
        if grad is not flat.grad:
            flat.grad.copy_(torch.as_tensor(grad))
        averaged = self.collective.average_(flat.grad)
        before = flat.data.clone() if metrics is not None and metrics.wants_layer_sample() else None
        super().push(averaged, samples, loss)
        if metrics is not None:
            metrics.accept(0, loss)  # applied by every worker at once, on the weights it was computed from
            if before is not None:
                metrics.record_layers(before, flat.data, averaged)


class RankZeroDuties:
    """What worker 0 publishes for the rest of the run: weights, evaluation points and snapshots."""

    def __init__(self, config: TrainConfig, redis_url: str, run: str, learner: Learner, global_steps: int,
                 metrics: ServerMetrics, start: int):
        self.config, self.learner, self.metrics, self.start = config, learner, metrics, start
        self.channel = LearnerChannel(connect_redis(redis_url), run)
        self.next_report = 0.0  # time.monotonic() of the next report of `metrics`
        self.layout, self.bounds = layout_bytes(learner.flat.layout_hash()), (0, learner.flat.size)
        self.publisher = WeightsPublisher(connect_redis(redis_url), run, plays_trained=True)
        self.published = self.snapshotted = learner.updates
        self.next_point = next_mark(global_steps, config.run.eval_every)
        self.superseded = False  # a later start of the stage has begun: this one publishes nothing more
        self.publisher.start()

    def after(self, global_steps: int) -> None:
        """Publishes what is due now that the run has `global_steps` env steps."""
        if self.superseded:
            return
        updates, distributed = self.learner.updates, self.config.distributed
        if global_steps >= self.next_point:
            self.publisher.hand_over_point(self._messages(target_too=False)[0], global_steps)
            self.next_point = next_mark(global_steps, self.config.run.eval_every)
        if updates - self.published >= distributed.publish_every:
            self.publisher.hand_over(updates, self._messages(target_too=True), global_steps)
            self.published = updates
        if updates - self.snapshotted >= distributed.server.snapshot_every:
            self.snapshot()
        if time.monotonic() >= self.next_report:
            self.report()

    def report(self) -> None:
        """The run's babysitting numbers where shard 0's would be (update rate, staleness: none, per-layer
        norms), for the dashboard, every REPORT_EVERY_S."""
        learner = self.learner
        report = self.metrics.report(0, learner.updates, learner.optimizer.learning_rate())
        self.next_report = time.monotonic() + REPORT_EVERY_S
        with contextlib.suppress(StoreError):  # for a person watching: never worth the stage's restart
            self.channel.write_report({**report, "role": "data-parallel"}, None)

    def _target_version(self) -> int:
        return last_target_refresh(self.learner.updates, self.learner.target_update)

    def _messages(self, target_too: bool) -> list[bytes]:
        learner = self.learner
        return weights_messages(self.layout, learner.updates, learner.flat.data, self._target_version(),
                                learner.target_flat.data if target_too else None)

    def snapshot(self) -> None:
        learner = self.learner
        state = ShardState(learner.updates, self._target_version(), learner.flat.data.cpu(),
                           learner.target_flat.data.cpu(), learner.optimizer.state_dict())
        if not self.channel.save_stage_snapshot(state, self.layout, self.bounds, self.start):
            self.superseded = True
            print(f"ddq: worker 0 of the stage's start {self.start + 1} publishes nothing more (its snapshot of "
                  f"{learner.updates} updates is not kept): a later start has begun", file=sys.stderr, flush=True)
        self.snapshotted = learner.updates

    def finish(self, global_steps: int) -> None:
        """The final weights and snapshot, sent before the task ends (the driver evaluates them next); then
        its connections close (Spark reuses the task's Python process)."""
        try:
            self.snapshot()
            if not self.superseded:
                self.report()
                self.publisher.hand_over(self.learner.updates, self._messages(target_too=True), global_steps)
            self.publisher.stop()
        finally:
            self.channel.client.close()
            self.publisher.client.close()


def resume_newest(learner: Learner, redis_url: str, run: str, start: int) -> None:
    """Begins `start` of the stage (earlier starts' snapshots are refused from now on), then loads the run's
    newest snapshot from Redis into `learner`, if there is one (rank 0's to read: the other ranks take its
    state from it, `take_rank_zeros_state`)."""
    client = connect_redis(redis_url)
    try:
        channel = LearnerChannel(client, run)
        channel.begin_stage_start(start)
        saved = channel.newest_snapshot(None, layout_bytes(learner.flat.layout_hash()), (0, learner.flat.size))
    finally:
        client.close()
    if saved is None:
        return
    learner.flat.data.copy_(saved.weights)
    learner.target_flat.data.copy_(saved.target)
    learner.optimizer.load_state_dict(saved.optimizer)
    learner.updates = saved.version


def take_rank_zeros_state(collective: Collective, learner: Learner) -> int:
    """Every rank's learner made rank 0's: weights, target, optimizer state and update count; the updates.
    Fresh starts drew their own weights; and ranks that each read the newest snapshot could read two (a
    stage's rank 0 may still be writing its last while the next start's ranks read it, where a cluster has
    task slots to spare), and drift apart for good: rank 0 alone reads it."""
    collective.broadcast_(learner.flat.data)
    collective.broadcast_(learner.target_flat.data)
    optimizer = learner.optimizer
    for key in sorted(optimizer.state):
        collective.broadcast_(optimizer.state[key])
    optimizer.steps = collective.from_rank_zero(optimizer.steps)
    learner.updates = collective.from_rank_zero(learner.updates)
    return learner.updates


class DataParallelWorker(Barista):
    """One rank of a data-parallel stage: a Barista training through `AveragedGradients`."""

    def __init__(self, config: TrainConfig, redis_url: str, run: str, rank: int, collective_for: CollectiveFactory,
                 attempt: int = 0):
        self.collective: Collective | None = None
        self.metrics: ServerMetrics | None = None

        def averaged(learner: Learner) -> AveragedGradients:
            if rank == 0:
                resume_newest(learner, redis_url, run, attempt)
            self.collective = collective_for(learner.device)
            self.resumed_updates = take_rank_zeros_state(self.collective, learner)
            if rank == 0:  # it counts the updates as a parameter server's shard would, and reports in its place
                self.metrics = ServerMetrics(layer_segments(learner.flat.layout, (0, learner.flat.size)))
            return AveragedGradients(learner, self.collective, self.metrics)

        super().__init__(config, redis_url, run, rank, averaged, attempt)
        self.rank, self.agreed, self.votes = rank, False, 0
        self.voted_at = 0  # the vector step of the last vote
        self.stats.started_from = self.resumed_updates
        assert self.collective is not None  # made by `averaged`, above
        # The workers play their vector steps together, so each counts the run's env steps itself: exactly at
        # each vote (`finished`: every worker's steps since the last, summed) and, between votes, as `workers`
        # times its own (`play`). Read back from Redis at each report, as other workers do, the count lagged
        # the other workers' reports: epsilon and the evaluation marks followed timing, and a seed's runs differed.
        began = self.channel.report(0, []) if rank == 0 else None  # a resumed run's or restarted stage's counts
        self.voted_count: int = self.collective.from_rank_zero(began.env_steps if began else 0)  # the run's env
        self.voted_own: int = self.actor.env_steps  # steps at the last vote, and this worker's then
        self.run_episodes = self.collective.from_rank_zero(began.episodes if began else 0)  # the run's, alike
        self.voted_own_episodes: int = self.stats.episodes
        self.global_steps = self.voted_count
        self.duties: RankZeroDuties | None = (RankZeroDuties(config, redis_url, run, self.learner, self.global_steps,
                                                             self.metrics, attempt)
                                              if rank == 0 else None)
        self.stepping_together = config.distributed.workers  # every worker steps with every other
        self.agent.schedule = update_schedule(config.agent, lockstep=True)  # DQN's updates pair up with the others'

    def heartbeat(self, state: str) -> None:
        if self.collective is not None:  # what synchronous training cost this worker so far
            self.stats.collective_s = self.collective.seconds
        super().heartbeat(state)

    def report_unreported(self) -> None:
        counted = self.global_steps, self.run_episodes
        super().report_unreported()
        self.global_steps, self.run_episodes = counted  # this worker's count of the run's (above), not Redis's

    def learn(self, new_steps: int) -> None:
        super().learn(new_steps)
        if self.duties is not None:
            self.duties.after(self.global_steps)

    def finished(self) -> bool:
        """The workers' common answer, voted every AGREE_EVERY vector steps in one all-reduce of each worker's
        env steps and episodes since the last vote and whether it saw the run stopped (at its last report): with
        the run's exact counts and the flag the same on every worker, the Barista's rule gives each the same
        answer (an episode budget, voted every AGREE_EVERY vector steps, is overshot by as many at most). Once
        agreed, no more votes (the loop's last check included). Near the step budget every vector step is
        voted on: once the slots played since the last vote (more than its transitions, and the same number on
        every worker) could have spent it. A MinAtar PQN run of 128 envs a worker had played up to 16 vector
        steps, 4,096 env steps, past its budget."""
        if self.agreed or self.collective is None:
            return self.agreed
        self.votes += 1
        slots = (self.votes - self.voted_at) * self.config.agent.num_envs * self.config.distributed.workers
        if self.votes % AGREE_EVERY == 0 or self.voted_count + slots >= self.config.run.total_steps:
            self.voted_at = self.votes
            stopped, played, ended = self.collective.totals([int(self.stopped), self.actor.env_steps - self.voted_own,
                                                             self.stats.episodes - self.voted_own_episodes])
            self.voted_own, self.voted_count = self.actor.env_steps, self.voted_count + played
            self.voted_own_episodes, self.run_episodes = self.stats.episodes, self.run_episodes + ended
            self.global_steps, self.stopped = self.voted_count, stopped > 0
            self.agreed = super().finished()
        return self.agreed

    def close(self) -> None:
        try:
            if self.duties is not None:
                self.duties.finish(self.global_steps)
        finally:
            if self.collective is not None:
                self.collective.close()
            super().close()

