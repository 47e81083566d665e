"""Downpour training (Dean et al. 2012, the original ddq's wiring): Baristas push gradients to a sharded
parameter server and pull its weights back, asynchronously.

Each Spark task runs one Barista: it plays its own envs, keeps its own
replay memory, computes minibatch gradients and pushes them to the shards,
which apply them with the run's optimizer and publish new weights. The
driver evaluates the shards' weights in line at every eval_every mark of the
workers' env steps. A dead shard is restarted from its snapshot; a dead task
is retried by Spark.
"""

from __future__ import annotations

from ddq.config import TrainConfig
from ddq.config.sections import BY_HAND
from ddq.core.agent import epsilon_schedule
from ddq.modes.by_hand_shards import ByHandShards
from ddq.modes.driver import Wiring
from ddq.modes.evaluators import InlineEvaluator
from ddq.modes.weights_service import ShardFleet
from ddq.spark.tasks import barista_task


def downpour(config: TrainConfig) -> Wiring:
    server, epsilon = config.distributed.server, epsilon_schedule(config.agent)
    # the one place the choice is made
    shards = (ByHandShards(server.shards, epsilon, config.distributed.stall_timeout) if server.shard_hosts == BY_HAND
              else ShardFleet(server.shards, epsilon))
    return Wiring(weights=shards, task=barista_task, evaluator=InlineEvaluator)
