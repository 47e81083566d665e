"""One parameter-server shard: owns a slice of the weights, the target and the optimizer state.

Workers LPUSH gradient messages onto the shard's list; the shard takes them
first in, first out, checks each (wire format, layout, staleness), applies
the optimizer step, bumps its version and publishes the new weights (once
per drained batch, so a busy server publishes less often, never falls
behind). The target slice refreshes every C updates. Every N updates it
snapshots; about once a second it publishes its babysitting metrics and looks
whether the run was told to stop.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path

import redis
import torch

from ddq.config import TrainConfig
from ddq.core.agent import model_parameters
from ddq.core.dqn import target_refresh_due
from ddq.core.optimizers import FlatOptimizer
from ddq.core.senders import SenderLedger
from ddq.lifecycle import RunControl
from ddq.param_server import snapshots
from ddq.param_server.metrics import ServerMetrics, layer_segments
from ddq.param_server.staleness import StalenessPolicy
from ddq.processes import tune_malloc
from ddq.transport.keys import RunKeys, shard_bounds
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.resp import LOST, Oversized, RespConnection
from ddq.transport.wire import WEIGHTS, Header, WireError, decode, gradient_expectation, layout_bytes, pack_header

log = logging.getLogger("ddq.param_server")
DRAIN_BATCH = 16  # gradients taken per round trip once the first one arrived
HOUSEKEEPING_S = 0.25


class ShardServer:
    def __init__(self, config: TrainConfig, redis_url: str, run: str, shard: int):
        tune_malloc()
        self.config, self.shard = config, shard
        flat = model_parameters(config.agent)
        self.bounds = shard_bounds(flat.size, config.distributed.server.shards)[shard]
        start, end = self.bounds
        self.layout = layout_bytes(flat.layout_hash())
        self.params = flat.data[start:end].clone()
        self.target = self.params.clone()
        slice_of = lambda v: None if v is None else v[start:end].clone()  # noqa: E731
        self.optimizer = FlatOptimizer(config.agent.optim, end - start, "cpu", slice_of(flat.multipliers("lr_mult")),
                                       slice_of(flat.multipliers("decay_mult")))
        self.version = self.target_version = 0
        self.keys = RunKeys(run).shard(shard)
        server = config.distributed.server
        self.policy = StalenessPolicy(server.max_staleness, server.staleness_scaling)
        self.expect = gradient_expectation(self.layout, self.bounds, max_bytes=64 + 4 * (end - start) * 2)
        self.metrics = ServerMetrics(layer_segments(flat.layout, self.bounds))
        self.senders = SenderLedger()  # no gradient is applied twice, even one sent or restored again
        self.before = torch.empty_like(self.params)  # weights before a sampled update, for the ratios
        self.redis = connect_redis(redis_url)
        self.control = RunControl(self.redis, run)
        self.fast = RespConnection(redis_url, buffer_bytes=4 * (end - start) + 4096, max_bulk=self.expect.max_bytes)
        run_dir = Path(config.run.run_dir) if config.run.run_dir else None
        self.snapshot_path = run_dir / f"param-server-shard{shard}.pt" if run_dir else None
        if run_dir:
            run_dir.mkdir(parents=True, exist_ok=True)
        self._resume()

    # ---------------------------------------------------------------- state
    def _resume(self) -> None:
        saved = snapshots.load_newest(self.redis, self.keys.snapshot, self.snapshot_path, self.layout, self.bounds)
        if saved is None:
            return
        self.params.copy_(saved.weights)
        self.target.copy_(saved.target)
        self.optimizer.load_state_dict(saved.optimizer)
        self.version, self.target_version = saved.version, saved.target_version
        log.info("shard %d resumed from its snapshot at version %d", self.shard, self.version)

    def snapshot(self) -> None:
        state = snapshots.ShardState(self.version, self.target_version, self.params, self.target,
                                     self.optimizer.state_dict())
        snapshots.save(self.redis, self.keys.snapshot, self.snapshot_path, state, self.layout, self.bounds)

    def _weights_message(self, version: int, values: torch.Tensor) -> tuple[bytes, memoryview]:
        start, end = self.bounds
        header = Header(WEIGHTS, self.layout, version, end - start, offset=start, shard=self.shard)
        return pack_header(header), values.numpy().data.cast("B")

    def _publish_commands(self, target_too: bool) -> list[tuple]:
        """Announce the applied version, then store the weights (Redis runs them in this order)."""
        commands = [("PUBLISH", self.keys.applied, str(self.version)),
                    ("SET", self.keys.weights, self._weights_message(self.version, self.params))]
        if target_too:
            commands.append(("SET", self.keys.target, self._weights_message(self.target_version, self.target)))
        return commands

    def publish(self, target_too: bool = False) -> None:
        self.fast.pipeline(self._publish_commands(target_too))

    # ---------------------------------------------------------------- gradients
    def handle(self, message: memoryview | Oversized) -> bool:
        """Applies one gradient message if it is acceptable; True when the weights moved."""
        try:
            if isinstance(message, Oversized):
                raise WireError("oversized", f"{message.size} bytes is over the {self.expect.max_bytes}-byte limit")
            header, values = decode(message, self.expect)
            if not self.senders.take(header.worker, header.sender, header.sequence):
                raise WireError("repeat", f"worker {header.worker}'s push {header.sequence} was applied before")
            staleness, lr_scale = self.policy.judge(self.version, header.version)
        except WireError as error:
            self.metrics.reject(error.reason, str(error), self.shard)
            return False
        if lr_scale is None:
            self.metrics.drop_stale(staleness)
            return False
        with warnings.catch_warnings():  # the gradient is read-only and only read
            warnings.simplefilter("ignore", UserWarning)
            grad = torch.from_numpy(values)
        sample = self.metrics.wants_layer_sample()
        if sample:
            self.before.copy_(self.params)
        self.optimizer.step(self.params, grad, lr_scale)
        if sample:
            self.metrics.record_layers(self.before, self.params, grad)
        self.version += 1
        self.metrics.accept(staleness, header.loss)
        if target_refresh_due(self.version, self.config.agent.target_update):
            self.target.copy_(self.params)
            self.target_version = self.version
        if self.version % self.config.distributed.server.snapshot_every == 0:
            self.snapshot()
        return True

    def _receive(self, timeout_s: float) -> bool:
        """Waits for a gradient and applies it, then publishes the weights in the same round trip that
        asks for more queued gradients, until none is left; True when the weights moved."""
        reply = self.fast.command("BRPOP", self.keys.grads, f"{timeout_s:g}")
        if reply is None:
            return False
        target_before = self.target_version
        moved = pending = self.handle(reply[1])
        deadline = time.monotonic() + HOUSEKEEPING_S  # a flooded server still looks after itself
        while True:
            commands = self._publish_commands(self.target_version != target_before) if pending else []
            target_before = self.target_version
            if time.monotonic() > deadline:
                self.fast.pipeline(commands)
                return moved
            batch = self.fast.pipeline(commands + [("RPOP", self.keys.grads, str(DRAIN_BATCH))])[-1]
            if not batch:
                return moved
            pending = False
            for message in batch:
                pending |= self.handle(message)
            moved |= pending

    def _drain_queued(self) -> None:
        """Once the run stops: applies what workers pushed before (the queue as it is now, no more, as a
        worker may still push once), then publishes, so the final snapshot holds every such update."""
        left = int(self.redis.llen(self.keys.grads))
        target_before, moved = self.target_version, False
        while left > 0:
            batch = self.fast.command("RPOP", self.keys.grads, str(min(left, DRAIN_BATCH)))
            if not batch:
                break
            left -= len(batch)
            for message in batch:
                moved |= self.handle(message)
        if moved:
            self.publish(target_too=self.target_version != target_before)

    # ---------------------------------------------------------------- loop
    def _reconnect(self, error: Exception) -> None:
        """Waits for Redis to come back (restarted from its snapshot, its weights may be older than these),
        then publishes the weights and target again. Gradients the snapshot brought back and this shard
        already applied are refused as repeats."""
        log.warning("shard %d lost its connection to Redis (%s); reconnecting", self.shard, error)
        self.fast.reconnect()
        self.publish(target_too=True)
        log.info("shard %d reconnected and published version %d again", self.shard, self.version)

    def housekeeping(self) -> bool:
        """Publishes metrics; False once the run was told to stop."""
        report = self.metrics.report(self.shard, self.version, self.optimizer.learning_rate())
        self.redis.set(self.keys.metrics, json.dumps(report))
        return not self.control.stopping()

    def serve(self) -> int:
        """Runs until the run's control key says stop; returns the process exit code."""
        log.info("shard %d serving parameters [%d, %d) at version %d", self.shard, *self.bounds, self.version)
        self.publish(target_too=True)
        self.housekeeping()
        next_housekeeping = time.monotonic() + HOUSEKEEPING_S
        try:
            while True:
                try:
                    self._receive(HOUSEKEEPING_S)
                except LOST as error:
                    self._reconnect(error)
                if time.monotonic() >= next_housekeeping:
                    if not self.housekeeping():
                        break
                    next_housekeeping = time.monotonic() + HOUSEKEEPING_S
            self.control.serve_until_workers_finished(lambda: self._receive(0.05))
            self._drain_queued()
        except (redis.ConnectionError, ConnectionError, OSError) as error:
            log.error("shard %d lost Redis for good (%s); exiting", self.shard, error)
            return 3
        self.snapshot()
        self.housekeeping()
        log.info("shard %d stopped at version %d, after its final snapshot (%d applied, %d stale, %d rejected)",
                 self.shard, self.version, self.metrics.applied, self.metrics.dropped_stale,
                 sum(self.metrics.rejected.values()))
        return 0

