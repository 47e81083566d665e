"""Training modes: each wires the core's parts one way (serial in one process; downpour over Spark and the
parameter server; actor-learner over Spark and one learner; data-parallel over a Spark barrier stage and
torch.distributed), and the run folder they all write."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddq.config import TrainConfig


def run_training(config: TrainConfig, run_dir: str | Path, started_at: float | None = None,
                 resume: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """Trains in the configured mode; (the run's summary, the exit code it earned: 0 only for a run that
    finished). The one place a mode is chosen (each imports its own machinery, Spark's included, lazily)."""
    started_at = time.time() if started_at is None else started_at
    if config.run.mode == "serial":
        from ddq.modes.serial import SerialTrainer

        serial = SerialTrainer(config, run_dir, started_at, resume=resume)
        return serial.run(), serial.exit_code
    if config.run.mode == "actor-learner":
        from ddq.modes.actor_learner import train_actor_learner

        return train_actor_learner(config, run_dir, started_at, resume)
    if config.run.mode == "data-parallel":
        from ddq.modes.data_parallel import train_data_parallel

        return train_data_parallel(config, run_dir, started_at, resume)
    from ddq.modes.downpour import train_downpour

    return train_downpour(config, run_dir, started_at, resume)
