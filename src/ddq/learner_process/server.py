"""The learner of actor-learner training (the wiring of Grandio's MPI-based distributed DQN, and Ape-X's).

Actors only play: they send their experience to the run's experience list in
Redis and read weights back. This one process owns the replay memory (one per
actor, sampled as one) and the optimizer, and trains at `replay_ratio`
updates per env step received, however many actors there are: it takes the
next message only once the updates the last one earned are done, and actors
wait when the list grows long, so the ratio holds and nobody runs ahead.
Weights go out every `publish_every` updates (--sync: once a round) through
the path workers already read (shard 0's weights and target keys, the parameter server's wire
format), so to an actor the learner is a parameter server. A background
thread takes messages from Redis and decodes them, another publishes, so the
training loop never waits on the network. Snapshots (weights, target,
optimizer state, counters) are the parameter server's: a restarted learner
goes on from the newest, and its replay memory refills from the actors.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import typing
from pathlib import Path

import numpy as np
import redis

from ddq.config import TrainConfig
from ddq.core.agent import (
    env_shapes,
    importance_beta,
    make_learner,
    make_replay,
    resolve_device,
    seed_everything,
    update_schedule,
)
from ddq.core.dqn import next_mark, target_refresh_due
from ddq.core.weights import LocalParameters, train_from_replay
from ddq.lifecycle import RunControl
from ddq.param_server import snapshots
from ddq.param_server.metrics import ServerMetrics, layer_segments
from ddq.processes import tune_malloc
from ddq.transport.eval_points import publish_point
from ddq.transport.experience import ExpectExperience, Experience, ExperienceError, decode
from ddq.transport.keys import RunKeys
from ddq.transport.wire import WEIGHTS, Header, layout_bytes, pack_header

log = logging.getLogger("ddq.learner")
HOUSEKEEPING_S = 0.25
# Decoded messages waiting for the training loop; beyond this the receiver lets Redis hold them, where they
# count against the actors' backlog. One is enough to decode the next message while training on this one;
# four let one CartPole actor run about 500 env steps ahead of the learner (its epsilon and weights lagged).
INBOX_MESSAGES = 1
# The env steps trained on only ever rise: the publishing thread and housekeeping both write them, and the one
# that counted first may write last (a server-side max, so the two never wait on each other).
RAISE_TO = ("local old = tonumber(redis.call('GET', KEYS[1]) or '-1') "
            "if tonumber(ARGV[1]) > old then redis.call('SET', KEYS[1], ARGV[1]) end")
UPDATES_PER_ROUND = 16  # the loop looks at its inbox and housekeeping between rounds of at most this many


class LearnerServer:
    def __init__(self, config: TrainConfig, redis_url: str, run: str):
        tune_malloc()
        seed_everything(config.seed, config.threads)
        self.config = config
        frame_shape, dtype, num_actions = env_shapes(config)
        self.learner = make_learner(config, frame_shape, num_actions, resolve_device(config.device))
        flat = self.learner.flat
        capacity = max(config.buffer_size // config.workers, 1)
        self.memories = [make_replay(config, frame_shape, dtype, config.seed + 7919 * (k + 1), capacity)
                         for k in range(config.workers)]
        self.local = LocalParameters(self.learner)
        self.schedule = update_schedule(config)
        self.expect = ExpectExperience(run, frame_shape, np.dtype(dtype), num_actions)
        self.keys, self.shard_keys = RunKeys(run), RunKeys(run).shard(0)
        self.layout, self.bounds = layout_bytes(flat.layout_hash()), (0, flat.size)
        self.redis = redis.Redis.from_url(redis_url)
        self.raise_to = self.redis.register_script(RAISE_TO)
        self.control = RunControl(self.redis, run)
        self.metrics = ServerMetrics(layer_segments(flat.layout, self.bounds))
        run_dir = Path(config.run_dir) if config.run_dir else None
        self.snapshot_path = run_dir / "learner.pt" if run_dir else None
        self.inbox: queue.Queue[Experience] = queue.Queue()
        self.receiver = threading.Thread(target=self._receive, args=(redis_url,), name="receive", daemon=True)
        self.publisher = threading.Thread(target=self._publish_loop, args=(redis_url,), name="publish", daemon=True)
        # the newest weights (and target) not yet published, with their version and the env steps trained on
        self.outbox: tuple[int, list[bytes], int] | None = None
        self.sending = threading.Lock()  # the training loop and the publisher both send weights
        self.sent_version = -1  # of the newest weights sent: an older hand-over never overwrites them
        self.eval_outbox: list[tuple[bytes, int]] = []  # weights of eval_every marks, with their trained steps
        self.outbox_ready = threading.Condition()
        self.stopping = threading.Event()
        self.receiving = threading.Lock()  # held while a message is between Redis and the inbox
        self.round_done = int(self.redis.get(self.keys.round_done) or -1)  # --sync
        self.owed = 0  # updates the experience taken so far has earned and that are not done yet
        self.ingested = 0  # env steps received since this process started
        self.trained_before = int(self.redis.get(self.keys.trained_steps) or 0)  # by earlier learner processes
        self.sequences: dict[int, tuple[int, int]] = {}  # actor -> (attempt, sequence) of its last message
        self.messages = self.publications = 0
        self.lags: list[int] = []  # how many updates old the weights were that acted, per message
        self.target_version = 0
        self._resume()
        self.next_eval_mark = next_mark(self.trained_steps, config.eval_every)

    # ---------------------------------------------------------------- state
    def _resume(self) -> None:
        saved = snapshots.load_newest(self.redis, self.shard_keys.snapshot, self.snapshot_path, self.layout,
                                      self.bounds)
        if saved is None:
            return
        self.learner.flat.data.copy_(saved.weights)
        self.learner.target_flat.data.copy_(saved.target)
        self.learner.optimizer.load_state_dict(saved.optimizer)
        self.learner.updates, self.target_version = saved.version, saved.target_version
        log.info("learner resumed from its snapshot at version %d; the replay memory refills from the actors",
                 saved.version)

    def snapshot(self) -> None:
        state = snapshots.ShardState(self.learner.updates, self.target_version, self.learner.flat.data.cpu(),
                                     self.learner.target_flat.data.cpu(), self.learner.optimizer.state_dict())
        snapshots.save(self.redis, self.shard_keys.snapshot, self.snapshot_path, state, self.layout, self.bounds)

    # ---------------------------------------------------------------- experience in
    def _receive(self, redis_url: str) -> None:
        """The receiving thread: takes messages off the run's list and decodes them into the inbox."""
        client = redis.Redis.from_url(redis_url)
        while not self.stopping.is_set():
            try:
                if not self.receive_once(client):
                    time.sleep(0.002)
            except redis.RedisError as error:
                log.error("learner lost Redis while receiving (%s)", error)
                self.stopping.set()
                return

    def receive_once(self, client: redis.Redis) -> bool:
        """Takes the next message, decoded, if the inbox has room (waiting briefly for one); False when it had
        no room. What it leaves in Redis counts against the actors' backlog."""
        if self.inbox.qsize() >= INBOX_MESSAGES:
            return False
        with self.receiving:
            taken = client.brpop([self.keys.experience], timeout=0.05 if self.config.sync else HOUSEKEEPING_S)
            if taken:
                try:
                    self.inbox.put(decode(typing.cast(bytes, taken[1]), self.expect))
                except ExperienceError as error:
                    self.metrics.reject(error.reason, str(error), 0)
        return True

    def ingest(self, experience: Experience) -> None:
        """Records a message's vector steps in its actor's memory; a message that does not follow the
        actor's last one (a lost message, a restarted actor or learner) starts its streams afresh."""
        memory = self.memories[experience.actor % len(self.memories)]
        last = self.sequences.get(experience.actor)
        continues = experience.continues
        if last != (experience.attempt, experience.sequence - 1) and continues[0].any():
            continues = continues.copy()
            continues[0] = False  # the frame before it is not ours: no transition into this one
        self.sequences[experience.actor] = (experience.attempt, experience.sequence)
        td = experience.td_errors
        for row in range(len(continues)):
            memory.add(experience.frames[row], experience.actions[row], experience.rewards[row],
                       experience.terminated[row], continues[row], None if td is None else td[row])
        steps = int(continues.sum())
        self.ingested += steps
        self.owed += self.schedule.due(steps, self.ingested)
        self.messages += 1
        self.lags.append(max(self.learner.updates - experience.weights_version, 0))

    # ---------------------------------------------------------------- weights out
    def _weights_messages(self, target_too: bool) -> list[bytes]:
        size = self.bounds[1]
        messages = [pack_header(Header(WEIGHTS, self.layout, self.learner.updates, size))
                    + self.learner.flat.data.detach().cpu().numpy().tobytes()]
        if target_too:
            messages.append(pack_header(Header(WEIGHTS, self.layout, self.target_version, size))
                            + self.learner.target_flat.data.detach().cpu().numpy().tobytes())
        return messages

    def publish(self, target_too: bool = False) -> None:
        """Hands the current weights to the publishing thread (a newer hand-over replaces an older one)."""
        messages = self._weights_messages(target_too)
        with self.outbox_ready:
            if self.outbox is not None and len(self.outbox[1]) > len(messages):
                messages.append(self.outbox[1][1])  # a target not yet published stays due
            self.outbox = (self.learner.updates, messages, self.trained_steps)
            self.outbox_ready.notify()

    def _publish_loop(self, redis_url: str) -> None:
        client = redis.Redis.from_url(redis_url)
        while True:
            with self.outbox_ready:
                while self.outbox is None and not self.eval_outbox and not self.stopping.is_set():
                    self.outbox_ready.wait(HOUSEKEEPING_S)
                weights, self.outbox = self.outbox, None
                points, self.eval_outbox = self.eval_outbox, []
            if weights is None and not points:
                return
            if weights is not None:
                self._send_weights(client, *weights)
            self._send_eval_points(client, points)

    def _keep_for_evaluation(self) -> None:
        """Once the env steps trained on crossed an eval_every mark: these weights go to the driver's
        evaluations (`ddq.transport.eval_points`), so each mark is evaluated as serial training would."""
        trained = self.trained_steps
        if trained < self.next_eval_mark:
            return
        self.next_eval_mark = next_mark(trained, self.config.eval_every)
        with self.outbox_ready:
            self.eval_outbox.append((self._weights_messages(target_too=False)[0], trained))
            self.outbox_ready.notify()

    def _send_eval_points(self, client: redis.Redis, points: list[tuple[bytes, int]]) -> None:
        try:
            for message, trained in points:
                publish_point(client, self.keys.eval_points, message, trained, self.keys.env_steps)
        except redis.RedisError as error:
            log.error("learner could not publish an evaluation point (%s)", error)
            self.stopping.set()

    def _send_now(self, client: redis.Redis) -> None:
        """Sends the current weights and target from the training loop, past the publishing thread."""
        self._send_weights(client, self.learner.updates, self._weights_messages(target_too=True), self.trained_steps)

    def _send_weights(self, client: redis.Redis, version: int, messages: list[bytes], trained: int) -> None:
        """Publishes weights with the env steps they were trained on: the actors' epsilon follows that count,
        and housekeeping's every quarter second lagged hundreds of env steps behind on a fast simulator."""
        try:
            with self.sending:
                if version < self.sent_version:
                    return  # the training loop sent newer weights while this hand-over waited
                pipe = client.pipeline(transaction=False)
                pipe.publish(self.shard_keys.applied, str(version))
                pipe.set(self.shard_keys.weights, messages[0])
                if len(messages) > 1:
                    pipe.set(self.shard_keys.target, messages[1])
                self.raise_to(keys=[self.keys.trained_steps], args=[trained], client=pipe)
                pipe.execute()
                self.sent_version = version
                self.publications += 1
        except redis.RedisError as error:
            log.error("learner could not publish its weights (%s)", error)
            self.stopping.set()

    # ---------------------------------------------------------------- training
    def train(self, updates: int) -> None:
        """`updates` gradient steps on replay (one sampled for the per-layer numbers), refreshing the target
        every C updates as the learner's rule says."""
        beta = importance_beta(self.config, self.trained_steps)
        for _ in range(updates):
            sample = self.metrics.wants_layer_sample()
            before = self.learner.flat.data.clone() if sample else None
            stats = train_from_replay(self.learner, self.memories, self.local, 1, self.config.batch_size, beta)[0]
            if before is not None:
                self.metrics.record_layers(before.cpu(), self.learner.flat.data.cpu(), self.learner.flat.grad.cpu())
            self.metrics.accept(0, stats.loss)
            self.owed -= 1  # before publishing: the weights go out with the env steps they were trained on
            if target_refresh_due(self.learner.updates, self.config.target_update):
                self.target_version = self.learner.updates
            # --sync publishes once a round is trained on: an actor still to sync must get the round's weights,
            # not those of the next round's first updates (a faster actor's experience may already be in)
            if not self.config.sync and self.learner.updates % self.config.publish_every == 0:
                self.publish(target_too=self.target_version == self.learner.updates)
            if self.learner.updates % self.config.server.snapshot_every == 0:
                self.snapshot()

    @property
    def trained_steps(self) -> int:
        """Env steps of the run the learner has caught up with: received, less those whose updates are still
        owed. Actor-learner's epsilon schedule follows this count, so exploration falls only as fast as
        the learner learns (the concern of asynchronous actors running ahead of what it knows)."""
        behind = int(np.ceil(self.owed / self.config.replay_ratio))
        return self.trained_before + max(self.ingested - behind, 0)

    def step(self) -> bool:
        """One round of the loop: take a message when the last ones' updates are done, else train a few of
        them. False when there was nothing to do."""
        if self.owed <= 0:
            try:
                experience = self.inbox.get(timeout=0.05)
            except queue.Empty:
                if self.config.sync:
                    self._finish_round()
                return False
            self.ingest(experience)
        else:
            self.train(min(self.owed, UPDATES_PER_ROUND))
        self._keep_for_evaluation()
        return True

    def _finish_round(self) -> None:
        """--sync: once every actor has sent a round (`round_ready`) and all of it is trained on, publishes the
        weights and says the round is done; the actors then start the next one with these weights."""
        ready = int(self.redis.get(self.keys.round_ready) or -1)
        if ready <= self.round_done:
            return
        with self.receiving:  # nothing between Redis and the inbox: an empty list and inbox hold it all
            if self.redis.llen(self.keys.experience) or not self.inbox.empty() or self.owed > 0:
                return
        self._send_now(self.redis)  # with the env steps trained on, before the actors may read the round done
        self.redis.set(self.keys.round_done, ready)
        self.round_done = ready

    def housekeeping(self) -> bool:
        """Publishes metrics and the trained steps; False once the run was told to stop."""
        report = self.metrics.report(0, self.learner.updates, self.learner.optimizer.learning_rate())
        lags, self.lags = self.lags, []
        report.update(role="learner", replay_size=sum(len(m) for m in self.memories), ingested=self.ingested,
                      messages=self.messages, publications=self.publications, owed_updates=self.owed,
                      trained_steps=self.trained_steps, policy_lag=float(np.mean(lags)) if lags else None)
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.shard_keys.metrics, json.dumps(report))
        self.raise_to(keys=[self.keys.trained_steps], args=[self.trained_steps], client=pipe)
        pipe.execute()
        return not self.control.stopping() and not self.stopping.is_set()

    def serve(self) -> int:
        """Runs until the run's control key says stop; returns the process exit code."""
        log.info("learner serving %d parameters at version %d", self.bounds[1], self.learner.updates)
        self._send_now(self.redis)
        self.housekeeping()  # announces this process (its pid) once its weights are out
        self.receiver.start()
        self.publisher.start()
        next_housekeeping = time.monotonic() + HOUSEKEEPING_S
        try:
            while True:
                self.step()
                if time.monotonic() >= next_housekeeping:
                    if not self.housekeeping():
                        break
                    next_housekeeping = time.monotonic() + HOUSEKEEPING_S
            lost = self.stopping.is_set()
            self._finish_queued()
        except (redis.ConnectionError, ConnectionError, OSError) as error:
            log.error("learner lost Redis (%s); exiting", error)
            return 3
        finally:
            self.stopping.set()
            with self.outbox_ready:
                self.outbox_ready.notify()
        if lost:
            return 3
        self.publisher.join(10)
        self._send_now(self.redis)
        self.snapshot()
        self.housekeeping()
        log.info("learner stopped at version %d after %d messages (%d env steps) and its final snapshot",
                 self.learner.updates, self.messages, self.ingested)
        return 0

    def _finish_queued(self) -> None:
        """Once the run stops: trains on what actors sent before (what the inbox and the list hold now)."""
        self.stopping.set()
        self.receiver.join(5)
        for message in self.redis.rpop(self.keys.experience, 10_000) or []:
            try:
                self.inbox.put(decode(typing.cast(bytes, message), self.expect))
            except ExperienceError as error:
                self.metrics.reject(error.reason, str(error), 0)
        while not self.inbox.empty() or self.owed > 0:
            if self.owed > 0:
                self.train(self.owed)
            else:
                self.ingest(self.inbox.get_nowait())
