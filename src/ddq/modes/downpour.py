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

from pathlib import Path
from typing import Any

from ddq.config import TrainConfig
from ddq.core.agent import epsilon_schedule
from ddq.modes.driver import Driver, Wiring
from ddq.modes.evaluators import InlineEvaluator
from ddq.modes.spark_tasks import barista_task
from ddq.modes.weights_service import ShardFleet


def downpour(config: TrainConfig) -> Wiring:
    shards = ShardFleet(config.distributed.server.shards, epsilon_schedule(config.agent))
    return Wiring(weights=shards, task=barista_task, evaluator=InlineEvaluator)


def train_downpour(config: TrainConfig, run_dir: str | Path, started_at: float | None = None,
                   resume: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """The run's summary and the exit code it earned."""
    driver = Driver(config, run_dir, downpour(config), started_at, resume)
    return driver.train(), driver.exit_code
