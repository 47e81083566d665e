"""The learner process of actor-learner training: Redis I/O and threads around the core's `CentralLearner`.

Actors only play: they send their experience to the run's experience list in
Redis and read weights back. This process takes each message (a receiving
thread decodes the next while the loop trains), hands it to the learner,
trains what it earned, and publishes weights every `publish_every` updates
(--sync: once a round) through `WeightsPublisher`. It takes the next message
only once the updates the last one earned are done, and actors wait when the
list grows long, so the replay ratio holds and nobody runs ahead. Snapshots
(weights, target, optimizer state, counters) are a shard's (`ddq.transport.snapshots`): a
restarted learner goes on from the newest, its replay memory refilled by the actors. Its
keys are reached through `ddq.transport.learner_channel`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path

import numpy as np

from ddq.config import TrainConfig
from ddq.core.agent import env_spec, make_learner, make_replay, resolve_device, seed_everything, update_schedule
from ddq.core.algorithms import algorithm_for
from ddq.core.algorithms.dqn import DQN
from ddq.core.central_learner import CentralLearner, CentralSettings, LearnerState
from ddq.lifecycle import HOUSEKEEPING_S, LOST_REDIS_EXIT, RunControl, serve_until_stopped
from ddq.processes import tune_malloc
from ddq.transport.experience import ExpectExperience, Experience, ExperienceError, decode
from ddq.transport.learner_channel import LearnerChannel
from ddq.transport.redis_client import Connection, StoreError, StoreUnavailable
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.server_metrics import ServerMetrics, layer_segments
from ddq.transport.snapshots import ShardState
from ddq.transport.weights_publisher import WeightsPublisher, weights_messages
from ddq.transport.wire import layout_bytes

log = logging.getLogger("ddq.learner")
# Decoded messages waiting for the training loop; beyond this the receiver lets Redis hold them, where they
# count against the actors' backlog. One is enough to decode the next message while training on this one;
# more let an actor run ahead of what the learner knows (its epsilon and weights lag).
INBOX_MESSAGES = 1
UPDATES_PER_ROUND = 16  # the loop looks at its inbox and housekeeping between rounds of at most this many


def central_learner(config: TrainConfig, trained_before: int, frame_shape: tuple[int, ...], dtype: np.dtype,
                    num_actions: int) -> CentralLearner:
    """The run's learner, one replay memory per actor."""
    learner = make_learner(config.agent, frame_shape, num_actions, resolve_device(config.agent.device))
    capacity = max(config.agent.buffer_size // config.distributed.workers, 1)
    memories = [make_replay(config.agent, frame_shape, dtype, config.agent.seed + 7919 * (k + 1),
                            config.run.total_steps, capacity)
                for k in range(config.distributed.workers)]
    agent, distributed = config.agent, config.distributed
    settings = CentralSettings(agent.batch_size, agent.replay_ratio, distributed.publish_every,
                               distributed.server.snapshot_every, config.run.eval_every, agent.target_update,
                               agent.priority_beta, config.run.total_steps, distributed.sync)
    algorithm = algorithm_for(config.agent.algo)
    if not isinstance(algorithm, DQN):  # its `modes` keep others out of actor-learner; this says why
        raise ValueError(f"the central learner trains from replay, as DQN and its kind do; algo {algorithm.name} "
                         "does not")
    return CentralLearner(learner, memories, update_schedule(config.agent), settings, trained_before,
                          algorithm.gradient)


class LearnerServer:
    """Drives a `CentralLearner` from the run's Redis until the run stops."""

    def __init__(self, config: TrainConfig, redis_url: str, run: str):
        tune_malloc()
        seed_everything(config.agent.seed, config.agent.threads)
        self.config, self.run = config, run
        self.redis = connect_redis(redis_url)
        self.channel = LearnerChannel(self.redis, run)
        spec = env_spec(config.agent)
        frame_shape, dtype, num_actions = spec.frame_shape, spec.frame_dtype, spec.num_actions
        self.core = central_learner(config, self.channel.trained_steps(), frame_shape, np.dtype(dtype), num_actions)
        flat = self.core.learner.flat
        self.expect = ExpectExperience(run, frame_shape, np.dtype(dtype), num_actions, config.distributed.workers,
                                       config.agent.num_envs)
        self.layout, self.bounds = layout_bytes(flat.layout_hash()), (0, flat.size)
        self.control = RunControl(self.redis, run)
        self.metrics = ServerMetrics(layer_segments(flat.layout, self.bounds))
        self.snapshot_path = Path(config.run.run_dir) / "learner.pt" if config.run.run_dir else None
        self.inbox: queue.Queue[Experience] = queue.Queue()
        self.receiving = threading.Lock()  # held while a message is between Redis and the inbox
        self.stopping = threading.Event()
        self.receiver = threading.Thread(target=self._receive, args=(redis_url,), name="receive", daemon=True)
        self.publisher = WeightsPublisher(connect_redis(redis_url), run)
        self.core.finish_round(self.channel.round_done())
        self._resume()

    # ---------------------------------------------------------------- snapshots
    def _resume(self) -> None:
        saved = self.channel.newest_snapshot(self.snapshot_path, self.layout, self.bounds)
        if saved is not None:
            self.core.load_state(LearnerState(saved.version, saved.target_version, saved.weights, saved.target,
                                              saved.optimizer))
            log.info("learner resumed from its snapshot at version %d; the replay memory refills from the actors",
                     saved.version)

    def snapshot(self) -> None:
        state = self.core.state()
        self.channel.save_snapshot(ShardState(state.updates, state.target_version, state.weights, state.target,
                                              state.optimizer), self.snapshot_path, self.layout, self.bounds)

    # ---------------------------------------------------------------- experience in
    def _receive(self, redis_url: str) -> None:
        """The receiving thread: takes messages off the run's list and decodes them into the inbox."""
        client = connect_redis(redis_url)
        while not self.stopping.is_set() and not self.publisher.failed.is_set():
            try:
                if not self.receive_once(client):
                    time.sleep(0.002)
            except StoreError as error:
                log.error("learner lost Redis while receiving (%s)", error)
                self.stopping.set()
                return

    def receive_once(self, client: Connection) -> bool:
        """Takes the next message, decoded, if the inbox has room (waiting briefly for one); False when it had
        no room. What it leaves in Redis counts against the actors' backlog."""
        if self.inbox.qsize() >= INBOX_MESSAGES:
            return False
        with self.receiving:
            wait_s = 0.05 if self.config.distributed.sync else HOUSEKEEPING_S
            taken = LearnerChannel(client, self.run).take_experience(wait_s)
            if taken is not None:
                self._decode_into_inbox(taken)
        return True

    def _decode_into_inbox(self, message: bytes) -> None:
        try:
            self.inbox.put(decode(message, self.expect))
        except ExperienceError as error:
            self.metrics.reject(error.reason, str(error), 0)

    # ---------------------------------------------------------------- training
    def weights(self, target_too: bool) -> list[bytes]:
        learner = self.core.learner
        return weights_messages(self.layout, learner.updates, learner.flat.data, self.core.target_version,
                                learner.target_flat.data if target_too else None)

    def train(self, updates: int) -> None:
        """`updates` gradient steps, each handing its weights to the publisher when they are due."""
        flat = self.core.learner.flat
        for _ in range(updates):
            before = flat.data.clone() if self.metrics.wants_layer_sample() else None
            done = self.core.train_once()
            if before is not None:
                self.metrics.record_layers(before.cpu(), flat.data.cpu(), flat.grad.cpu())
            self.metrics.accept(0, done.stats.loss, done.stats.mean_max_q)
            if done.publish:
                self.publisher.hand_over(self.core.learner.updates, self.weights(done.target_refreshed),
                                         self.core.trained_steps)
            if done.snapshot:
                self.snapshot()

    def step(self) -> bool:
        """One round of the loop: take a message when the last ones' updates are done, else train a few of
        them. False when there was nothing to do."""
        if self.core.owed <= 0:
            try:
                experience = self.inbox.get(timeout=0.05)
            except queue.Empty:
                if self.config.distributed.sync:
                    self._finish_round()
                return False
            self.core.ingest(experience)
        else:
            self.train(min(self.core.owed, UPDATES_PER_ROUND))
        if (trained := self.core.evaluation_due()) is not None:
            self.publisher.hand_over_point(self.weights(target_too=False)[0], trained)
        return True

    def send_now(self) -> None:
        """Sends the current weights and target from the training loop, past the publishing thread."""
        self.publisher.send(self.redis, self.core.learner.updates, self.weights(target_too=True),
                            self.core.trained_steps)

    def _finish_round(self) -> None:
        """--sync: once every actor has sent a round and all of it is trained on, publishes the weights and
        says the round is done; the actors then start the next one with these weights."""
        ready = self.channel.round_ready()
        if ready <= self.core.round_done:
            return
        with self.receiving:  # nothing between Redis and the inbox: an empty list and inbox hold it all
            queued = self.channel.experience_waiting() or not self.inbox.empty()
            if not self.core.round_finishable(ready, not queued):
                return
        self.send_now()  # with the env steps trained on, before the actors may read the round done
        self.channel.set_round_done(ready)
        self.core.finish_round(ready)

    def housekeeping(self) -> bool:
        """Publishes metrics and the trained steps; False once the run was told to stop."""
        core = self.core
        report = {**self.metrics.report(0, core.learner.updates, core.learner.optimizer.learning_rate()),
                  "senders": core.senders.account()}
        lags = core.take_lags()
        report.update(role="learner", replay_size=sum(len(m) for m in core.memories), ingested=core.ingested,
                      messages=core.messages, repeats=core.senders.repeats,
                      publications=self.publisher.publications, owed_updates=core.owed,
                      trained_steps=core.trained_steps, policy_lag=float(np.mean(lags)) if lags else None)
        self.publisher.with_trained(core.trained_steps, lambda trained: self.channel.write_report(report, trained))
        return not self.control.stopping() and not self.stopping.is_set() and not self.publisher.failed.is_set()

    # ---------------------------------------------------------------- the process
    def serve(self) -> int:
        """Runs until the run's control key says stop; returns the process exit code."""
        log.info("learner serving %d parameters at version %d", self.bounds[1], self.core.learner.updates)
        self.send_now()
        self.housekeeping()  # announces this process (its pid) once its weights are out
        self.receiver.start()
        self.publisher.start()
        try:
            serve_until_stopped(self.step, self.housekeeping)
            lost = self.stopping.is_set() or self.publisher.failed.is_set()
            if not lost:
                self.control.serve_until_workers_finished(self.step)
            self._finish_queued()
        except (StoreUnavailable, ConnectionError, OSError) as error:
            log.error("learner lost Redis (%s); exiting", error)
            return LOST_REDIS_EXIT
        finally:
            self.stopping.set()
            self.publisher.stop()
        if lost:
            return LOST_REDIS_EXIT
        self.send_now()
        self.snapshot()
        self.housekeeping()
        log.info("learner stopped at version %d after %d messages (%d env steps) and its final snapshot",
                 self.core.learner.updates, self.core.messages, self.core.ingested)
        return 0

    def _finish_queued(self) -> None:
        """Once the run stops: trains on what actors sent before (what the inbox and the list hold now)."""
        self.stopping.set()
        self.receiver.join(5)
        for message in self.channel.take_queued_experience():
            self._decode_into_inbox(message)
        while not self.inbox.empty() or self.core.owed > 0:
            if self.core.owed > 0:
                self.train(self.core.owed)
            else:
                self.core.ingest(self.inbox.get_nowait())
