"""A distributed run's first step, taken before it imports its wiring: the run's id, where its parts listen,
its Redis password, and Spark starting on a thread of the driver. Spark's JVM, its executors and their
Python workers then start while the driver builds its wiring, its network and its services, instead of
after. (torch is loaded by then: the settings' checks, `ddq.preflight`, build the network before anything
may start.)"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddq.config import TrainConfig
from ddq.modes.placement import Placement, placement
from ddq.modes.spark import SparkStarting, launched_by_spark_submit, local_master
from ddq.shipping import package_zip
from ddq.transport.credentials import run_password


@dataclass(frozen=True)
class Launch:
    """A distributed run as it starts: what the driver takes over."""

    run: str  # the run's id: its Redis keys' prefix and Spark's application name
    placement: Placement
    redis_password: str | None  # its Redis's (`run_password`), None for a private one on this host only
    spark: SparkStarting


def launch(config: TrainConfig, run_dir: Path) -> Launch:
    """Starts Spark for a run into `run_dir` (its log goes there), on a thread: `Launch.spark.result()` waits."""
    d = config.distributed
    submitted = launched_by_spark_submit()
    place = placement(config, submitted)
    master = d.spark_master or (None if submitted else local_master(d.workers))
    driver_host = place.advertise if place.cluster or not submitted else None
    run = f"{run_dir.name}-{uuid.uuid4().hex[:6]}"
    password = run_password(d.redis_url, place.listen)

    def ship(context: Any) -> None:  # executors elsewhere import ddq from the job, not their environment
        if place.ship:
            context.addPyFile(str(package_zip(run_dir / "ship")))

    run_dir.mkdir(parents=True, exist_ok=True)
    spark = SparkStarting(master, f"ddq-{run}", run_dir / "spark.log", driver_host, place.bind, d.workers, ship,
                          password)
    return Launch(run, place, password, spark)
