"""Downpour training driven by Spark: one task per Barista, a Redis parameter server between them.

The driver starts (or connects to) Redis and the parameter-server shards,
runs a Spark job whose N tasks each run a Barista until the run's global env
step budget is spent, and meanwhile logs the workers' episodes, evaluates
the server's weights greedily, and stops the run (`ddq.lifecycle`) once the
target return is reached, the time budget is spent or a person asks
(Ctrl-C, SIGTERM, or the control key). It supervises every process it
started: a dead shard is restarted from its snapshot, a task that dies is
retried by Spark (`spark.task.maxFailures`), and a run that cannot go on
(Redis gone, a shard that keeps dying) ends with one error line, a summary
and the newest checkpoint it has.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
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
from ddq.core.dqn import next_mark
from ddq.core.replay import state_shape
from ddq.dashboard.launch import serve_dashboard
from ddq.gamesim import eats_apples
from ddq.lifecycle import RunControl, StopReason, StopSignals, stop_reason
from ddq.modes.bookkeeping import RunCounters, RunLog, evaluate_and_record, progress_values, run_summary
from ddq.modes.spark import barista_task, launched_by_spark_submit, local_master, spark_session
from ddq.param_server.client import ParameterClient
from ddq.param_server.launch import start_shard, stop_shards, wait_until_serving
from ddq.processes import ProcessFailed, Supervisor, stop
from ddq.services.archive import save_telemetry
from ddq.services.celery_launch import start_celery_worker
from ddq.services.telemetry import ListCursor, RunReporter, network_info, record_evaluation, worker_rows
from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis

JOB_CANCEL_WAIT_S = 30.0  # a failed run waits this long for Spark to cancel its tasks


class SparkJobFailed(RuntimeError):
    pass


def python_error(text: str) -> str:
    """The line that says what went wrong in a Spark error's text: the last Python exception it quotes
    ("ValueError: ..."), else its first line."""
    quoted = re.findall(r"^(\w+(?:Error|Exception|Failed)\b.*)$", text, re.MULTILINE)
    return quoted[-1] if quoted else text.splitlines()[0]


class DownpourTrainer:
    """The driver of `ddq train --mode downpour`."""

    def __init__(self, config: TrainConfig, run_dir: str | Path, started_at: float | None = None,
                 resume: dict[str, Any] | None = None):
        """`resume`: the checkpoint of an earlier run into `run_dir`; its counters (env steps, so epsilon,
        episodes, evaluations, wall time) continue, and the shards resume from their snapshot files."""
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
        self.counters = RunCounters.from_dict(resume["counters"]) if resume else RunCounters()
        # the run's clock: from the command's start, less the earlier sessions of a resumed run
        self.origin = self.started_at - self.counters.wall_time_s
        self.last_eval: tuple[int, float, float] | None = None
        self.next_eval = next_mark(self.counters.env_steps, config.eval_every)  # env steps of the next evaluation
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=100)  # for the progress bar
        self.epsilon = epsilon_schedule(config)  # reported as the workers see it: by the global env steps
        self.supervisor = Supervisor()
        self.signals = StopSignals()
        self.failure: str | None = None  # the one line that says what ended a run that could not go on
        self.exit_code = 0

    # ------------------------------------------------------------------ the run
    def train(self) -> dict[str, Any]:
        c = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            if not c.redis_url and (c.spark_master or launched_by_spark_submit()):
                print("ddq: note: the private Redis listens on a unix socket of this machine; executors on other "
                      "machines need --redis-url redis://HOST:PORT (or rediss://) of a server they can reach",
                      file=sys.stderr)
            master = c.spark_master or (None if launched_by_spark_submit() else local_master(c.workers))
            spark = spark_session(master, f"ddq-{self.run}", self.run_dir / "spark.log")
            stack.callback(spark.stop)
            stack.enter_context(self.signals)  # after Spark's session: pyspark installs a SIGINT handler of its own
            url = self._start_services(stack)
            self.client.sync()
            self._save_checkpoint()  # from the start, a driver killed at any moment leaves a run to resume
            try:
                self._run_spark_job(spark, url)
                self._wait_for_drained_queues()
                self._evaluate()
                self.control.stop(StopReason.BUDGET)  # kept only if nothing stopped the run earlier
            except (ProcessFailed, SparkJobFailed, redis.RedisError) as error:
                self.failure = f"{type(error).__name__}: {error}" if isinstance(error, redis.RedisError) else str(error)
                print(f"ddq: error: the run cannot go on: {self.failure}", file=sys.stderr, flush=True)
            summary = self._finish()
            with contextlib.suppress(redis.RedisError):
                self.reporter.finish(summary)
                save_telemetry(self.redis, self.keys, self.run_dir)  # for `ddq dashboard RUN_DIR`
        self.exit_code = 1 if self.failure else self.signals.exit_code()
        return summary

    def _start_services(self, stack: contextlib.ExitStack) -> str:
        """Redis (unless given), the shards, Celery and the dashboard, each supervised; returns Redis's URL."""
        c = self.config
        if c.redis_url:
            url = c.redis_url
        else:
            embedded = stack.enter_context(EmbeddedRedis(log_dir=self.run_dir))
            self.supervisor.watch("redis-server", embedded.process, embedded.log_path)
            url = embedded.url
        self.redis = redis.Redis.from_url(url)
        self.control = RunControl(self.redis, self.run)
        self.episodes = ListCursor(self.redis, self.keys.episodes)
        flat = self.learner.flat
        self.reporter = RunReporter(self.redis, self.keys, {
            "run": self.run, "started": self.started_at, "run_dir": str(self.run_dir.resolve()),
            "settings": settings_document(c),
            "network": network_info(flat.layout, flat.layout_hash(), self.state_shape)}, c.server.shards)
        print(f"ddq: run id {self.run} (the Redis keys ddq:{self.run}:*)", file=sys.stderr, flush=True)
        self.redis.set(self.keys.env_steps, self.counters.env_steps)  # a resumed run's workers go on from here
        settings = write_settings(c, self.run_dir / "config.json")
        self._start_weights_service(stack, settings, url)
        if c.celery:
            celery_worker = start_celery_worker(url, self.run, self.run_dir, settings)
            self.supervisor.watch("the Celery worker", celery_worker, self.run_dir / "celery.log", essential=False)
            stack.callback(stop, celery_worker)
        if c.dashboard:
            stack.enter_context(serve_dashboard(url, self.run, self.run_dir, c.dashboard_port, self.supervisor))
        self.client = ParameterClient(url, self.run, self.learner.flat, c.server.shards,
                                      target=self.learner.target_flat)
        stack.callback(self.client.close)
        return url

    def _start_weights_service(self, stack: contextlib.ExitStack, settings: Path, url: str) -> None:
        """The processes that own the weights, supervised and stopped with the run: here the parameter-server
        shards (restarted from their snapshots when they die); returns once they serve."""
        self.shards = []
        for k in range(self.config.server.shards):
            def restart(k: int = k) -> Any:
                return start_shard(settings, url, self.run, self.run_dir, k)
            self.shards.append(self.supervisor.watch(f"parameter-server shard {k}", restart(),
                                                     self.run_dir / f"param-server-{k}.log", restart=restart))
        stack.callback(lambda: stop_shards(self.redis, self.run, [entry.process for entry in self.shards]))
        wait_until_serving(self.redis, self.run, self.config.server.shards, [entry.process for entry in self.shards])

    def _stage(self, rdd: Any) -> Any:
        """The RDD whose partitions the tasks run on (a mode that needs a barrier stage says so here)."""
        return rdd

    # What each Spark task runs (a module-level function: Spark ships it to the executors, not the driver).
    SPARK_TASK = staticmethod(barista_task)

    def _run_spark_job(self, spark: Any, url: str) -> None:
        """Runs the Barista tasks to the end of the run, watching over it meanwhile (`_watch`)."""
        c = self.config
        settings, run, task = encode_settings(c), self.run, self.SPARK_TASK
        results: dict[str, Any] = {}

        def job() -> None:
            try:
                rdd = self._stage(spark.sparkContext.parallelize(range(c.workers), c.workers))
                rdd.mapPartitionsWithIndex(lambda index, rows: task(index, rows, settings, url, run)).collect()
            except Exception as error:  # reported by the driver loop below
                results["error"] = error

        thread = threading.Thread(target=job, name="spark-job", daemon=True)
        thread.start()
        clean = False
        try:
            self._watch(thread)
            clean = "error" not in results
        finally:  # a job that ended cleanly spent the budget (unless something stopped it before)
            with contextlib.suppress(redis.RedisError):
                self.control.stop(StopReason.BUDGET if clean else StopReason.FAILURE)
            if not clean:
                spark.sparkContext.cancelAllJobs()
            thread.join(None if clean else JOB_CANCEL_WAIT_S)
        if "error" in results:
            raise SparkJobFailed(f"the Spark job failed: {python_error(str(results['error']))}")

    def _watch(self, job: threading.Thread) -> None:
        """While the job runs: supervise the processes, log episodes, evaluate every eval_every steps, and
        stop at the target, the time budget or a signal (the workers stop at the step budget themselves)."""
        c = self.config
        reached = False
        with tqdm(total=c.total_steps, initial=self.counters.env_steps, unit="step", disable=not c.progress,
                  mininterval=1.0, dynamic_ncols=True) as bar:
            while job.is_alive():
                job.join(0.5)
                try:
                    stopping = self.control.stopping()
                except redis.RedisError:
                    stopping = False  # the supervisor names what died, if it is ours
                self.supervisor.check(stopping)
                self.reporter.record_restarts(self.supervisor.restarts())
                steps = int(self.redis.get(self.keys.env_steps) or 0)
                bar.update(min(steps, c.total_steps) - bar.n)  # past the total, tqdm would drop the percentage
                self.counters.env_steps = steps
                self.counters.wall_time_s = time.time() - self.origin
                self._drain_episodes()
                epsilon = self._workers_epsilon(steps)
                self.reporter.record_progress(steps, epsilon)
                recent = sum(self.recent_returns) / len(self.recent_returns) if self.recent_returns else None
                bar.set_postfix(progress_values(recent, epsilon, self.last_eval, eats_apples(self.config.env)),
                                refresh=False)
                reached = self._periodic_evaluation(steps, stopping) or reached
                reason = stop_reason(None, c.total_steps, reached, c.time_budget_s, self.started_at,
                                     user_stopped=self.signals.received is not None,
                                     episodes=self.counters.episodes, total_episodes=c.total_episodes)
                if reason is not None and not stopping:
                    self.control.stop(reason)

    def _periodic_evaluation(self, env_steps: int, stopping: bool) -> bool:
        """Evaluates the server's weights once the env steps played crossed the next eval_every mark; True
        once the target return is reached."""
        if env_steps < self.next_eval or stopping:
            return False
        self.next_eval = next_mark(env_steps, self.config.eval_every)
        return self._evaluate()

    def _workers_epsilon(self, env_steps: int) -> float:
        """The exploration rate the workers act with now (reported): the schedule at the global env steps."""
        return self.epsilon(env_steps)

    def _wait_for_drained_queues(self, timeout: float = 60.0) -> None:
        """Until every shard has applied what was pushed, so the final evaluation and summary see the last
        updates: every shard process has ended (a stopped shard applies its queue before it exits), or
        every queue is empty and each shard reported after that (it applies what it took before it
        reports). Counts would not do: a restarted shard counts from zero."""
        deadline = time.monotonic() + timeout
        empty_since = None
        shards = range(self.config.server.shards)
        while time.monotonic() < deadline and not all(entry.process.poll() is not None for entry in self.shards):
            lengths = [self.redis.llen(self.keys.shard(k).grads) for k in shards]
            if any(lengths):
                empty_since = None
            elif empty_since is None:
                empty_since = time.time()
            else:
                reports = [json.loads(self.redis.get(self.keys.shard(k).metrics) or "{}") for k in shards]
                if all(report.get("time", 0) > empty_since for report in reports):
                    return
            time.sleep(0.05)

    def _drain_episodes(self) -> None:
        for episode in self.episodes.read_new():
            self.counters.episodes += 1
            self.recent_returns.append(float(episode.get("episode_return") or 0.0))
            self.log.write("episode", env_steps=episode.get("env_steps", self.counters.env_steps),
                           worker=episode.get("worker"), episode_return=episode.get("episode_return"),
                           length=episode.get("length"), truncated=episode.get("truncated"))

    def _evaluate(self) -> bool:
        """Greedy evaluation of the server's current weights; True once the target return is reached."""
        self.client.sync()
        self.last_eval, reached = evaluate_and_record(
            self.learner.online, self.config, self.log, self.counters, self.counters.env_steps,
            self.client.version, self.origin, self.device)
        record_evaluation(self.redis, self.keys, "driver", self.client.version, self.last_eval[0],
                          self.last_eval[1], [], mean_rewarded_steps=self.last_eval[2])
        self._save_checkpoint()  # so a run whose driver is killed can still be resumed from here
        return reached

    def _save_checkpoint(self) -> Path:
        """The driver's mirror of the server's weights (as of its last sync) with the run's counters; the
        shards keep their own, newer snapshots, which a resumed run starts from."""
        self.learner.updates = self.client.version
        return ckpt.save_checkpoint(self.run_dir / ckpt.CHECKPOINT_NAME, self.config, self.learner,
                                    self.counters.as_dict(), {})

    def _finish(self) -> dict[str, Any]:
        """Summary, progress point and checkpoint: from the server when it is there, from the driver's
        mirror of its weights (as of the last evaluation) when the run failed. The summary's workers are
        every attempt's last report (a killed attempt's steps and pushes count too)."""
        workers: list[dict] = []
        self.counters.wall_time_s = time.time() - self.origin
        with contextlib.suppress(redis.RedisError):
            workers = worker_rows(self.redis, self.keys)
            self._drain_episodes()
            self.reporter.record_progress(self.counters.env_steps, self._workers_epsilon(self.counters.env_steps),
                                          force=True)
        path = self._save_checkpoint()
        reason = f"{StopReason.FAILURE.value}: {self.failure}" if self.failure else self.control.reason()
        summary = run_summary(self.config, self.counters, self.last_eval, self.client.version, path, reason)
        summary["stopped_by"] = self.signals.received
        summary["restarts"] = self.supervisor.restarts()
        summary["workers"] = workers
        self.log.write_summary(summary)
        self.log.close()
        return summary
