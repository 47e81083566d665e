"""Starting parameter-server shards as child processes of the driver (or of a benchmark or test)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

from ddq.config import REDIS_URL_ENV, TrainConfig, write_settings
from ddq.lifecycle import RunControl, StopReason
from ddq.processes import spawn, stop
from ddq.transport.redis_client import Connection, StoreError
from ddq.transport.run_store import RunStore, json_object


def start_shard(settings: Path, redis_url: str, run: str, folder: Path, shard: int) -> subprocess.Popen:
    """One `ddq param-server` process for `shard`, reading the run's settings file, logging to
    folder/param-server-<shard>.log. A shard started again resumes from its newest snapshot."""
    return spawn([sys.executable, "-m", "ddq", "param-server", "--settings", str(settings), "--run", run,
                  "--shard", str(shard)], folder / f"param-server-{shard}.log", env={REDIS_URL_ENV: redis_url})


def start_shards(config: TrainConfig, redis_url: str, run: str, folder: Path,
                 settings: Path | None = None) -> list[subprocess.Popen]:
    """One `ddq param-server` process per shard; `settings` is the run's settings file (written into
    folder/config.json when not given)."""
    settings = settings or write_settings(config, folder / "config.json")
    return [start_shard(settings, redis_url, run, folder, k) for k in range(config.distributed.server.shards)]


def wait_until_serving(client: Connection, run: str, shards: int, processes: list[subprocess.Popen],
                       timeout: float = 120.0, name: str = "a parameter-server shard") -> None:
    """Returns once every serving process (each shard, or the actor-learner learner, which serves as shard
    0) published its weights; raises, saying `name`, if one died or the wait ran out.

    A server announces itself with its pid in its metrics, right after publishing
    its weights, so weights a dead predecessor left behind do not count.
    """
    store = RunStore(client, run)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reports = [json_object(raw) for raw in store.shard_reports(shards)]
        if all(r and r.get("pid") == p.pid for r, p in zip(reports, processes)):
            return
        dead = [p for p in processes if p.poll() is not None]
        if dead:
            raise RuntimeError(f"{name} exited with code {dead[0].returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not publish weights within {timeout:.0f} s")


def stop_servers(client: Connection, run: str, processes: list[subprocess.Popen], timeout: float = 30.0,
                reason: StopReason | None = None) -> list[int | None]:
    """Asks the run's serving processes (shards, or the learner) to finish (they snapshot and exit by
    themselves), then makes sure. The run keeps the stop reason it already has; `reason` (default: the
    budget) only when it has none. With Redis gone they cannot be asked: they are ended at once."""
    told, control = False, RunControl(client, run)
    with contextlib.suppress(StoreError):
        control.stop(StopReason.BUDGET if reason is None else reason)
        control.mark_workers_finished()  # nothing is left to wait for: the run's workers are done
        told = True
    deadline = time.monotonic() + (timeout if told else 0.0)
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    return [stop(process) for process in processes]
