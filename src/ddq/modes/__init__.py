"""Training modes: each wires the core's parts one way (serial in one process; downpour over Spark and the
parameter server; actor-learner over Spark and one learner; data-parallel over a Spark barrier stage and
torch.distributed), and the run folder they all write."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddq.config import is_distributed

if TYPE_CHECKING:
    from ddq.config import TrainConfig
    from ddq.modes.driver import Wiring
    from ddq.spark.jvm_boot import BootingJvm


def run_training(config: TrainConfig, run_dir: str | Path, started_at: float | None = None,
                 resume: dict[str, Any] | None = None, booted: BootingJvm | None = None) -> tuple[dict[str, Any], int]:
    """Trains in the configured mode; (the run's summary, the exit code it earned: 0 only for a run that
    finished). The one place a mode is chosen (each imports its own machinery, Spark's included, lazily).
    A distributed run starts Spark first (`ddq.modes.launch`), on the JVM `booted` when the settings' checks
    launched one: the driver builds its wiring, network and services meanwhile."""
    started_at = time.time() if started_at is None else started_at
    if not is_distributed(config.run.mode):
        from ddq.modes.serial import SerialTrainer

        serial = SerialTrainer(config, run_dir, started_at, resume=resume)
        return serial.run(), serial.exit_code
    from ddq.modes.launch import launch

    launched = launch(config, Path(run_dir), booted)
    try:
        from ddq.modes.driver import Driver

        driver = Driver(config, run_dir, distributed_wiring(config, resume), launched, started_at, resume)
        return driver.train(), driver.exit_code
    finally:
        launched.spark.stop()  # the driver stops it as its run ends; this, when the run failed before that


def distributed_wiring(config: TrainConfig, resume: dict[str, Any] | None) -> Wiring:
    """What makes the configured distributed mode: who owns the weights, what each Spark task runs, how
    the driver evaluates."""
    if config.run.mode == "actor-learner":
        from ddq.modes.actor_learner import actor_learner

        return actor_learner(config, int(resume["counters"]["env_steps"]) if resume else 0)
    if config.run.mode == "data-parallel":
        from ddq.modes.data_parallel import data_parallel

        return data_parallel(config)
    from ddq.modes.downpour import downpour

    return downpour(config)
