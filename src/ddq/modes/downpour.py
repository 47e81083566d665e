"""Downpour training driven by Spark: one task per Barista, a Redis parameter server between them.

The driver starts (or connects to) Redis and the parameter-server shards,
runs a Spark job whose N tasks each run a Barista until the run's global env
step budget is spent, and meanwhile logs the workers' episodes, evaluates
the server's weights greedily, and stops the run (`ddq.lifecycle`) once the
target return is reached or the time budget is spent. A task that dies is
retried by Spark (`spark.task.maxFailures`); the new Barista rebuilds its
replay memory and continues from the server's current weights.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from tqdm import tqdm

from ddq.config import TrainConfig, encode_settings, settings_document, write_settings
from ddq.core import checkpoint as ckpt
from ddq.core.agent import env_shapes, epsilon_schedule, make_learner, resolve_device, seed_everything
from ddq.core.replay import state_shape
from ddq.dashboard.launch import serve_dashboard
from ddq.lifecycle import RunControl, StopReason, stop_reason
from ddq.modes.bookkeeping import RunCounters, RunLog, evaluate_and_record, run_summary
from ddq.modes.spark import barista_task, launched_by_spark_submit, local_master, spark_session
from ddq.param_server.client import ParameterClient
from ddq.param_server.launch import start_shards, stop_shards, wait_until_serving
from ddq.processes import stop
from ddq.services.celery_launch import start_celery_worker
from ddq.services.telemetry import ListCursor, RunReporter, network_info, record_evaluation
from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis


class DownpourTrainer:
    """The driver of `ddq train --mode downpour`."""

    def __init__(self, config: TrainConfig, run_dir: str | Path, started_at: float | None = None):
        self.config, self.run_dir = config, Path(run_dir)
        self.started_at = started_at if started_at is not None else time.time()
        self.run = f"{self.run_dir.name}-{uuid.uuid4().hex[:6]}"
        self.keys = RunKeys(self.run)
        seed_everything(config.seed, config.threads)
        self.device = resolve_device(config.device)
        frame_shape, _, num_actions = env_shapes(config)
        self.state_shape = state_shape(frame_shape, config.frame_stack)
        self.learner = make_learner(config, frame_shape, num_actions, self.device)  # a mirror of the server's
        self.log = RunLog(self.run_dir)
        self.counters = RunCounters()
        self.last_eval: tuple[int, float, float] | None = None
        self.epsilon = epsilon_schedule(config)  # reported as the workers see it: by the global env steps

    # ------------------------------------------------------------------ the run
    def train(self) -> dict[str, Any]:
        c = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            if not c.redis_url and (c.spark_master or launched_by_spark_submit()):
                print("ddq: note: the private Redis listens on a unix socket of this machine; executors on other "
                      "machines need --redis-url redis://HOST:PORT (or rediss://) of a server they can reach",
                      file=sys.stderr)
            url = c.redis_url or stack.enter_context(EmbeddedRedis(log_dir=self.run_dir)).url
            self.redis = redis.Redis.from_url(url)
            self.control = RunControl(self.redis, self.run)
            self.episodes = ListCursor(self.redis, self.keys.episodes)
            flat = self.learner.flat
            self.reporter = RunReporter(self.redis, self.keys, {
                "run": self.run, "started": self.started_at, "run_dir": str(self.run_dir.resolve()),
                "settings": settings_document(c),
                "network": network_info(flat.layout, flat.layout_hash(), self.state_shape)}, c.server.shards)
            print(f"ddq: run id {self.run} (the Redis keys ddq:{self.run}:*)", file=sys.stderr, flush=True)
            settings_file = write_settings(c, self.run_dir / "config.json")
            shards = start_shards(c, url, self.run, self.run_dir)
            stack.callback(lambda: stop_shards(self.redis, self.run, shards))
            wait_until_serving(self.redis, self.run, c.server.shards, shards)
            if c.celery:
                celery_worker = start_celery_worker(url, self.run, self.run_dir, settings_file)
                stack.callback(self._stop_celery, celery_worker)
            if c.dashboard:
                stack.enter_context(serve_dashboard(url, self.run, self.run_dir, c.dashboard_port))
            self.client = ParameterClient(url, self.run, self.learner.flat, c.server.shards,
                                          target=self.learner.target_flat)
            stack.callback(self.client.close)
            workers = self._run_spark_job(url)
            self._wait_for_drained_queues()
            self._evaluate()
            self.control.stop(StopReason.BUDGET)  # kept only if nothing stopped the run earlier
            summary = self._finish(workers)
            self.reporter.finish(summary)
        return summary

    def _stop_celery(self, worker: subprocess.Popen) -> None:
        if worker.poll() is not None:
            print(f"ddq: warning: the Celery worker exited early (code {worker.returncode}); "
                  f"see {self.run_dir / 'celery.log'}", file=sys.stderr)
        stop(worker)

    def _run_spark_job(self, url: str) -> list[dict]:
        c = self.config
        master = c.spark_master or (None if launched_by_spark_submit() else local_master(c.workers))
        spark = spark_session(master, f"ddq-{self.run}")
        settings, run = encode_settings(c), self.run
        results: dict[str, Any] = {}

        def job() -> None:
            try:
                rdd = spark.sparkContext.parallelize(range(c.workers), c.workers)
                results["workers"] = rdd.mapPartitionsWithIndex(
                    lambda index, rows: barista_task(index, rows, settings, url, run)).collect()
            except Exception as error:  # reported by the driver loop below
                results["error"] = error

        thread = threading.Thread(target=job, name="spark-job", daemon=True)
        thread.start()
        try:
            self._watch(thread)
        finally:  # a job that ended cleanly spent the budget (unless something stopped it before)
            clean = not thread.is_alive() and "error" not in results
            self.control.stop(StopReason.BUDGET if clean else StopReason.FAILURE)
            thread.join()
            spark.stop()
        if "error" in results:
            raise RuntimeError(f"the Spark job failed: {results['error']}")
        return results["workers"]

    def _watch(self, job: threading.Thread) -> None:
        """While the job runs: log episodes, evaluate every eval_every steps, stop at the target or the
        time budget (the workers themselves stop at the step budget)."""
        c = self.config
        next_eval = c.eval_every
        session_start = time.time()
        reached = False
        with tqdm(total=c.total_steps, unit="step", disable=not c.progress, mininterval=1.0,
                  dynamic_ncols=True) as bar:
            while job.is_alive():
                job.join(0.5)
                steps = int(self.redis.get(self.keys.env_steps) or 0)
                bar.update(steps - bar.n)
                self.counters.env_steps = steps
                self.counters.wall_time_s = time.time() - session_start
                self._drain_episodes()
                self.reporter.record_progress(steps, self.epsilon(steps))
                if steps >= next_eval:
                    next_eval = (steps // c.eval_every + 1) * c.eval_every
                    reached = self._evaluate() or reached
                reason = stop_reason(steps, c.total_steps, reached, c.time_budget_s, self.started_at)
                if reason is not None and reason is not StopReason.BUDGET:  # workers stop at the budget themselves
                    self.control.stop(reason)

    def _wait_for_drained_queues(self, timeout: float = 60.0) -> None:
        """Until every shard has handled (applied, dropped or rejected) every gradient pushed, so the
        final evaluation and summary see the last updates."""
        pushed = int(self.redis.get(self.keys.pushes) or 0)
        deadline = time.monotonic() + timeout
        for shard in range(self.config.server.shards):
            while time.monotonic() < deadline:
                report = json.loads(self.redis.get(self.keys.shard(shard).metrics) or "{}")
                handled = sum(report.get(key, 0) for key in ("applied", "dropped_stale", "rejected_total"))
                if handled >= pushed:
                    break
                time.sleep(0.05)

    def _drain_episodes(self) -> None:
        for episode in self.episodes.read_new():
            self.counters.episodes += 1
            self.log.write("episode", env_steps=episode.get("env_steps", self.counters.env_steps),
                           worker=episode.get("worker"), episode_return=episode.get("episode_return"),
                           length=episode.get("length"), truncated=episode.get("truncated"))

    def _evaluate(self) -> bool:
        """Greedy evaluation of the server's current weights; True once the target return is reached."""
        self.client.sync()
        self.last_eval, reached = evaluate_and_record(
            self.learner.online, self.config, self.log, self.counters, self.counters.env_steps,
            self.client.version, self.started_at, self.device)
        record_evaluation(self.redis, self.keys, "driver", self.client.version, self.last_eval[0],
                          self.last_eval[1], [])
        return reached

    def _finish(self, workers: list[dict]) -> dict[str, Any]:
        self._drain_episodes()
        self.reporter.record_progress(self.counters.env_steps, self.epsilon(self.counters.env_steps), force=True)
        self.learner.updates = self.client.version
        path = ckpt.save_checkpoint(self.run_dir / ckpt.CHECKPOINT_NAME, self.config, self.learner,
                                    self.counters.as_dict(), {})
        summary = run_summary(self.config, self.counters, self.last_eval, self.client.version, path,
                              self.control.reason())
        summary["workers"] = workers
        self.log.write_summary(summary)
        self.log.close()
        return summary
