"""A distributed run's first step, taken before it imports its wiring: the run's id, where its parts listen,
its Redis password, and Spark starting on a thread of the driver. Spark's JVM, its executors and their
Python workers then start while the driver builds its wiring, its network and its services, instead of
after. On the local master ddq picks, the JVM boots earlier still, while the settings are checked
(`boot_spark`, `ddq.spark.jvm_boot`): those checks build the network, which imports torch, before anything
else may start."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddq.config import TrainConfig, is_distributed
from ddq.config.masters import with_task_retries
from ddq.shipping import package_zip
from ddq.spark.context import (
    TASK_RETRIES,
    launched_by_spark_submit,
    local_master,
    prepare_environment,
    quiet_py4j,
    spark_conf,
)
from ddq.spark.jvm_boot import BootingJvm
from ddq.spark.placement import Placement, placement
from ddq.spark.start import SparkStarting
from ddq.transport.credentials import run_password

APP_PREFIX = "ddq-"  # Spark's application name: this, then the run's id


@dataclass(frozen=True)
class Launch:
    """A distributed run as it starts: what the driver takes over."""

    run: str  # the run's id: its Redis keys' prefix and Spark's application name
    placement: Placement
    redis_password: str | None  # its Redis's (`run_password`), None for a private one on this host only
    spark: SparkStarting


@dataclass(frozen=True)
class SparkDriver:
    """Where a run's Spark driver runs: its master (None: spark-submit's), and the address executors reach
    it at (None: as spark-submit was told)."""

    placement: Placement
    master: str | None
    driver_host: str | None


def spark_driver(config: TrainConfig, submitted: bool) -> SparkDriver:
    """The one rule for where a run's Spark driver runs, for `boot_spark` and `launch` alike."""
    place = placement(config, submitted)
    named = config.distributed.spark_master
    if named:  # a local one retries a failed task as ddq's default does
        master: str | None = with_task_retries(named, TASK_RETRIES)
    else:
        master = None if submitted else local_master(config.distributed.workers)
    return SparkDriver(place, master, place.advertise if place.cluster or not submitted else None)


def boot_spark(config: TrainConfig) -> BootingJvm | None:
    """Spark's JVM for a distributed run on the local master ddq picks, launched now, on a thread, while the
    settings are checked (`ddq.spark.jvm_boot`); None for serial runs, a named master (a cluster's, or a
    local one not checked yet), spark-submit's JVM and a `--listen` address (not checked yet, and the JVM's
    environment would carry it). The caller kills it when a check fails, or hands it to `launch`."""
    d = config.distributed
    if not is_distributed(config.run.mode) or launched_by_spark_submit() or d.spark_master is not None or d.listen:
        return None
    driver = spark_driver(config, submitted=False)
    quiet_py4j()
    prepare_environment(driver.master, driver.driver_host, driver.placement.bind)
    app = app_name(new_run_id(Path(str(config.run.run_dir))))  # on the JVM's command line: `ps` finds the run
    return BootingJvm(spark_conf(driver.master, app, driver.driver_host, driver.placement.bind))


def new_run_id(run_dir: Path) -> str:
    """A run's id: its folder's name and a few random letters (a resumed run gets a new one)."""
    return f"{run_dir.name}-{uuid.uuid4().hex[:6]}"


def app_name(run: str) -> str:
    """Spark's application name for the run `run`: on the JVM's command line, where `ps` finds it."""
    return f"{APP_PREFIX}{run}"


def launch(config: TrainConfig, run_dir: Path, booted: BootingJvm | None = None) -> Launch:
    """Starts Spark for a run into `run_dir` (its log goes there), on a thread: `Launch.spark.result()` waits.
    `booted`: its JVM, when `boot_spark` launched it already (killed if the launch fails before Spark has it)."""
    try:
        d = config.distributed
        submitted = launched_by_spark_submit()
        driver = spark_driver(config, submitted)
        place = driver.placement
        # a booted JVM's app name holds the run's id already
        run = new_run_id(run_dir) if booted is None else str(booted.conf.get("spark.app.name")).removeprefix(APP_PREFIX)
        password = run_password(d.redis_url, place.listen)

        def ship(context: Any) -> None:  # executors elsewhere import ddq from the job, not their environment
            if place.ship:
                context.addPyFile(str(package_zip(run_dir / "ship")))

        run_dir.mkdir(parents=True, exist_ok=True)
    except BaseException:
        if booted is not None:
            booted.kill()
        raise
    spark = SparkStarting(driver.master, app_name(run), run_dir / "spark.log", driver.driver_host, place.bind,
                          d.workers, ship, password, booted)
    return Launch(run, place, password, spark)
