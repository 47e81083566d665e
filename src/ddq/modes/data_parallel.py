"""Data-parallel training: N Spark tasks in one barrier stage, each a worker that plays its own envs and
computes its own gradients, averaged over all of them every update (torch.distributed), so that all hold
the same weights and nothing is stale. No parameter server, no learner process.

The synchronous wiring of DD-PPO (Wijmans et al. 2020), started the Spark way:
a barrier stage's tasks start together, form the process group through a
store in the run's Redis, and start again together when one fails (the
driver starts the stage again), from the newest snapshot worker 0 wrote
(`ddq.workers.data_parallel`). Its learning per env step is
serial training's with N times the envs. Worker 0 publishes the weights, at
each eval_every mark of the run's env steps, where the driver reads them:
the driver evaluates those points beside the run, as in actor-learner mode.
Stragglers: every update waits for the slowest worker (there is no backup
worker or preemption); on N equal one-core hosts they hardly differ.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ddq.config import TrainConfig, workers_start_together
from ddq.core.agent import epsilon_schedule, model_parameters
from ddq.core.dqn import LinearSchedule
from ddq.models import FlatParameters
from ddq.modes.driver import Wiring
from ddq.modes.evaluators import PointEvaluator
from ddq.modes.weights_service import SERVING_TIMEOUT_S, ServiceContext
from ddq.spark.tasks import data_parallel_task
from ddq.transport.learner_channel import LearnerChannel
from ddq.transport.redis_client import StoreError
from ddq.transport.weights_publisher import weights_messages
from ddq.transport.wire import layout_bytes

SNAPSHOT_FILE = "data-parallel.pt"


class WorkerZeroPublishes:
    """The weights service of a data-parallel run: no process of its own. It publishes the starting
    weights (a resumed run's snapshot, else the model's first weights) where the driver and the workers
    read them; worker 0 publishes from then on; at the end it keeps the newest snapshot in the run folder,
    which `--resume` starts from."""

    slices = 1

    def __init__(self, initial: FlatParameters, epsilon: LinearSchedule):
        self.initial, self.epsilon = initial, epsilon
        self.layout, self.bounds = layout_bytes(initial.layout_hash()), (0, initial.size)
        self.context: ServiceContext | None = None
        self.kept = -1  # the version of the snapshot this driver wrote into the run folder (-1: none yet)

    def _channel(self) -> LearnerChannel:
        assert self.context is not None, "start() first"
        return LearnerChannel(self.context.redis, self.context.run)

    def start(self, context: ServiceContext) -> None:
        self.context = context
        channel = self._channel()
        saved = channel.newest_snapshot(context.run_dir / SNAPSHOT_FILE, self.layout, self.bounds)
        if saved is None:
            weights = self.initial.data
            messages = weights_messages(self.layout, 0, weights, 0, weights)
        else:  # a resumed run: the workers start from it (they read it from Redis, wherever they run)
            channel.save_snapshot(saved, None, self.layout, self.bounds)
            messages = weights_messages(self.layout, saved.version, saved.weights, saved.target_version, saved.target)
        channel.publish_weights(saved.version if saved else 0, messages, None)

    def serving(self, timeout: float = SERVING_TIMEOUT_S) -> None:
        pass  # published by start()

    def drained(self, timeout: float | None = None) -> None:
        pass  # worker 0 published its last weights before its task ended

    def stop(self) -> None:
        """Keeps worker 0's newest snapshot in the run folder (Redis goes with the run)."""
        self.keep()

    def keep(self) -> None:
        """Worker 0's newest snapshot (in the run's Redis) copied into the run folder, beside each checkpoint
        the driver writes: worker 0 may run on another host, and a driver killed before the run's end had left
        none, so that its resume started from new weights (and wrote them over the checkpoint)."""
        if self.context is None:
            return
        with contextlib.suppress(StoreError):  # a Redis gone for good: the run ends on that, not here
            copied = self._channel().copy_snapshot(self.context.run_dir / SNAPSHOT_FILE, self.layout, self.bounds,
                                                   newer_than=self.kept)
            self.kept = self.kept if copied is None else copied

    def restart(self, index: int = 0) -> Any:
        raise RuntimeError("a data-parallel run's weights live in its workers: the driver starts their stage again")

    def workers_epsilon(self, env_steps: int) -> float:
        return self.epsilon(env_steps)  # each worker's follows the run's global env steps


def data_parallel(config: TrainConfig) -> Wiring:
    service = WorkerZeroPublishes(model_parameters(config.agent), epsilon_schedule(config.agent))
    return Wiring(weights=service, task=data_parallel_task, evaluator=PointEvaluator,
                  barrier=workers_start_together(config.run.mode, config.distributed.sync),
                  starts_again_when_stalled=True)
