"""One parameter-server shard's process: Redis I/O around the core's `Shard` (a slice of the weights, the
target and the optimizer state, and the arithmetic that moves them: `ddq.core.shard`).

Workers LPUSH gradient messages onto the shard's list; the shard takes them
first in, first out, checks each (wire format, layout, staleness), applies
the optimizer step, bumps its version and publishes the new weights (once
per drained batch, so a busy server publishes less often, never falls
behind). The target slice refreshes every C updates. Every N updates it
snapshots; about once a second it publishes its babysitting metrics and looks
whether the run was told to stop.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import torch

from ddq.config import TrainConfig
from ddq.core.agent import model_parameters
from ddq.core.optimizers import FlatOptimizer
from ddq.core.shard import Shard
from ddq.lifecycle import HOUSEKEEPING_S, LOST_REDIS_EXIT, RunControl, serve_until_stopped
from ddq.models import FlatParameters
from ddq.param_server.staleness import StalenessPolicy
from ddq.processes import tune_malloc
from ddq.transport.keys import shard_bounds
from ddq.transport.redis_client import Connection, StoreRefused, StoreUnavailable
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.resp import LOST, Oversized, RespConnection
from ddq.transport.server_metrics import ServerMetrics, layer_segments
from ddq.transport.shard_channel import ShardChannel
from ddq.transport.snapshots import ShardState
from ddq.transport.wire import WireError, decode, gradient_expectation, layout_bytes

log = logging.getLogger("ddq.param_server")
DRAIN_BATCH = 16  # gradients taken per round trip once the first one arrived
# A snapshot that could not be written: the file (OSError; torch.save reports a failed write as RuntimeError)
# or Redis refusing it (out of memory, or writes stopped after its own RDB failed). A lost connection is not
# one of them: that is an outage, waited out elsewhere.
SNAPSHOT_FAILURES = (OSError, RuntimeError, StoreRefused)


def gradient_bytes(size: int) -> int:
    """The most bytes a gradient message of a `size`-value slice may take (its header, its values, slack)."""
    return 64 + 4 * size * 2


class ShardServer:
    """Redis I/O around the core's `Shard`: takes gradient messages, checks them, hands them over, publishes."""

    def __init__(self, config: TrainConfig, flat: FlatParameters, client: Connection, fast: RespConnection, run: str,
                 shard: int):
        tune_malloc()
        self.config, self.shard_index = config, shard
        self.bounds = shard_bounds(flat.size, config.distributed.server.shards)[shard]
        start, end = self.bounds
        self.layout = layout_bytes(flat.layout_hash())
        slice_of = lambda v: None if v is None else v[start:end].clone()  # noqa: E731
        server = config.distributed.server
        optimizer = FlatOptimizer(config.agent.optim, end - start, "cpu", slice_of(flat.multipliers("lr_mult")),
                                  slice_of(flat.multipliers("decay_mult")))
        policy = StalenessPolicy(server.max_staleness, server.staleness_scaling)
        self.core = Shard(flat.data[start:end], optimizer, policy, config.agent.target_update, server.snapshot_every)
        self.expect = gradient_expectation(self.layout, self.bounds, max_bytes=gradient_bytes(end - start))
        self.metrics = ServerMetrics(layer_segments(flat.layout, self.bounds))
        self.before = torch.empty_like(self.core.params)  # weights before a sampled update, for the ratios
        self.snapshot_failing = False  # the last snapshot tried failed
        # where other hosts reach the Redis of its own that holds its gradients and weights, registered with each
        # report (`ddq.param_server.shard_host`); None: they live in the run's Redis
        self.registration: str | None = None
        self.channel = ShardChannel(client, fast, run, shard, self.layout, self.bounds)
        self.control = RunControl(client, run)
        run_dir = Path(config.run.run_dir) if config.run.run_dir else None
        self.snapshot_path = run_dir / f"param-server-shard{shard}.pt" if run_dir else None
        if run_dir:
            run_dir.mkdir(parents=True, exist_ok=True)
        self._resume()

    @classmethod
    def connect(cls, config: TrainConfig, redis_url: str, run: str, shard: int, store_url: str | None = None,
                registration: str | None = None) -> ShardServer:
        """Shard `shard` of the run's parameter server, with its two connections: to the run's Redis for
        reports and snapshots, and the hot path, sized for the shard's messages, to where its gradients and
        weights live (`store_url`: a Redis of its own, which other hosts reach at `registration`; default the
        run's)."""
        flat = model_parameters(config.agent)
        start, end = shard_bounds(flat.size, config.distributed.server.shards)[shard]
        fast = RespConnection(store_url or redis_url, buffer_bytes=4 * (end - start) + 4096,
                              max_bulk=gradient_bytes(end - start))
        server = cls(config, flat, connect_redis(redis_url), fast, run, shard)
        server.registration = registration
        return server

    # ---------------------------------------------------------------- state
    def _resume(self) -> None:
        saved = self.channel.newest_snapshot(self.snapshot_path)
        if saved is None:
            return
        self.core.load_state(**vars(saved))
        log.info("shard %d resumed from its snapshot at version %d", self.shard_index, self.core.version)

    def snapshot(self) -> bool:
        """Saves the shard's state in Redis and in its file; False when either refused. A failed snapshot (a
        full disk, Redis refusing writes) is no reason to stop serving: the previous one stays whole, the
        next is tried at its time, and only the first failure of a streak is said."""
        try:
            self.channel.save_snapshot(ShardState(**self.core.state()), self.snapshot_path)
        except SNAPSHOT_FAILURES as error:
            if not self.snapshot_failing:
                log.warning("shard %d could not save its snapshot at version %d (%s); it goes on serving and "
                            "tries again at the next", self.shard_index, self.core.version,
                            str(error).splitlines()[0] if str(error) else type(error).__name__)
            self.snapshot_failing = True
            return False
        if self.snapshot_failing:
            log.info("shard %d saved its snapshot again, at version %d", self.shard_index, self.core.version)
        self.snapshot_failing = False
        return True

    def _publication(self, target_too: bool) -> list[tuple]:
        core = self.core
        return self.channel.publication(core.version, core.params, core.target_version,
                                        core.target if target_too else None)

    def publish(self, target_too: bool = False) -> None:
        self.channel.publish(self._publication(target_too))

    # ---------------------------------------------------------------- gradients
    def handle(self, message: memoryview | Oversized) -> bool:
        """Applies one gradient message if it is acceptable; True when the weights moved."""
        try:
            if isinstance(message, Oversized):
                raise WireError("oversized", f"{message.size} bytes is over the {self.expect.max_bytes}-byte limit")
            header, values = decode(message, self.expect)
            with warnings.catch_warnings():  # the gradient is read-only and only read
                warnings.simplefilter("ignore", UserWarning)
                grad = torch.from_numpy(values)
            sample = self.metrics.wants_layer_sample()
            if sample:
                self.before.copy_(self.core.params)
            taken = self.core.take(header.worker, header.sender, header.sequence, header.version, grad)
        except WireError as error:
            self.metrics.reject(error.reason, str(error), self.shard_index)
            return False
        if taken.repeat:
            self.metrics.reject("repeat", f"worker {header.worker}'s push {header.sequence} was applied before",
                                self.shard_index)
            return False
        if taken.stale:
            self.metrics.drop_stale(taken.staleness)
            return False
        if sample:
            self.metrics.record_layers(self.before, self.core.params, grad)
        self.metrics.accept(taken.staleness, header.loss)
        if taken.snapshot_due:
            self.snapshot()
        return True

    def _receive(self, timeout_s: float) -> bool:
        """Waits for a gradient and applies it, then publishes the weights in the same round trip that
        asks for more queued gradients, until none is left; True when the weights moved."""
        message = self.channel.wait_for_gradient(timeout_s)
        if message is None:
            return False
        target_before = self.core.target_version
        moved = pending = self.handle(message)
        deadline = time.monotonic() + HOUSEKEEPING_S  # a flooded server still looks after itself
        while True:
            publication = self._publication(self.core.target_version != target_before) if pending else []
            target_before = self.core.target_version
            if time.monotonic() > deadline:
                self.channel.publish(publication)
                return moved
            batch = self.channel.publish_and_take(publication, DRAIN_BATCH)
            if not batch:
                return moved
            pending = False
            for message in batch:
                pending |= self.handle(message)
            moved |= pending

    def _drain_queued(self) -> None:
        """Once the run stops: applies what workers pushed before (the queue as it is now, no more, as a
        worker may still push once), then publishes, so the final snapshot holds every such update."""
        left = self.channel.queued()
        target_before, moved = self.core.target_version, False
        while left > 0:
            batch = self.channel.take_queued(min(left, DRAIN_BATCH))
            if not batch:
                break
            left -= len(batch)
            for message in batch:
                moved |= self.handle(message)
        if moved:
            self.publish(target_too=self.core.target_version != target_before)

    # ---------------------------------------------------------------- loop
    def _reconnect(self, error: Exception) -> None:
        """Waits for Redis to come back (restarted from its snapshot, its weights may be older than these),
        then publishes the weights and target again. Gradients the snapshot brought back and this shard
        already applied are refused as repeats."""
        log.warning("shard %d lost its connection to Redis (%s); reconnecting", self.shard_index, error)
        self.channel.reconnect()
        self.publish(target_too=True)
        log.info("shard %d reconnected and published version %d again", self.shard_index, self.core.version)

    def housekeeping(self, stopped: bool = False) -> bool:
        """Publishes metrics (`stopped`: the last, after the final snapshot); False once the run was told to
        stop."""
        report = {**self.metrics.report(self.shard_index, self.core.version, self.core.optimizer.learning_rate()),
                  "senders": self.core.senders.account(), "stopped": stopped}
        # registered again each time: a driver started again (resumed) forgets every store it finds
        self.channel.write_report(report, None if stopped else self.registration)
        return not self.control.stopping()

    def _receive_or_reconnect(self) -> None:
        try:
            self._receive(HOUSEKEEPING_S)
        except LOST as error:
            self._reconnect(error)

    def serve(self) -> int:
        """Runs until the run's control key says stop; returns the process exit code."""
        log.info("shard %d serving parameters [%d, %d) at version %d", self.shard_index, *self.bounds,
                 self.core.version)
        self.publish(target_too=True)
        self.housekeeping()
        try:
            serve_until_stopped(self._receive_or_reconnect, self.housekeeping)
            self.control.serve_until_workers_finished(lambda: self._receive(0.05))
            self._drain_queued()
        except (StoreUnavailable, ConnectionError, OSError) as error:
            log.error("shard %d lost Redis for good (%s); exiting", self.shard_index, error)
            return LOST_REDIS_EXIT
        if not self.snapshot():
            log.error("shard %d stopped at version %d without its final snapshot", self.shard_index,
                      self.core.version)
        if self.registration is not None:
            self.channel.hand_back(self._publication(target_too=True))
        self.housekeeping(stopped=True)
        log.info("shard %d stopped at version %d, after its final snapshot (%d applied, %d stale, %d rejected)",
                 self.shard_index, self.core.version, self.metrics.applied, self.metrics.dropped_stale,
                 sum(self.metrics.rejected.values()))
        return 0

