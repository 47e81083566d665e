"""The driver of a distributed run, whatever its mode: a `Wiring` says who owns the weights, what each Spark
task runs and how the driver evaluates; the driver does the rest the same way for every mode.

It starts (or connects to) Redis and the weights service, runs the Spark job
(the run's helpers, Celery and the dashboard, once its tasks have started)
until the run's global env step budget is spent, and
meanwhile logs the workers' episodes, evaluates, and stops the run
(`ddq.lifecycle`) once the target return is reached, the time budget is spent
or a person asks (Ctrl-C, SIGTERM, or the control key). It supervises every
process it started: a dead weights process is restarted from its snapshot, a
task that dies is retried by Spark (`spark.task.maxFailures`), and a run that
cannot go on (Redis gone, a process that keeps dying) ends with one error
line, a summary and the newest checkpoint it has.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ddq.bookkeeping import RunCounters, RunRecord, open_run_log, progress_values, resumed_counters, run_summary
from ddq.config import TrainConfig, encode_settings
from ddq.core.agent import env_spec, make_learner, resolve_device, seed_everything
from ddq.core.dqn import next_mark
from ddq.core.replay import state_shape
from ddq.lifecycle import StopReason, StopSignals, budget_spent, stop_reason
from ddq.modes.evaluators import EvaluatorFactory, WeightsMirror
from ddq.modes.launch import Launch
from ddq.modes.run_services import RunServices
from ddq.modes.weights_service import ServiceContext, WeightsService
from ddq.processes import ProcessFailed, Supervisor
from ddq.services.archive import save_telemetry
from ddq.services.telemetry import (
    lost_and_redone,
    network_info,
    newest_rows,
    played,
    sender_account,
    shard_reports,
    worker_rows,
)
from ddq.spark.context import SparkJobFailed
from ddq.spark.job import SparkJob, SparkTask
from ddq.spark.start import SparkStarting
from ddq.transport.credentials import split_password
from ddq.transport.redis_client import StoreError, snapshot_failed
from ddq.transport.run_store import RunStore
from ddq.transport.values import finite_number

JOB_CANCEL_WAIT_S = 30.0  # a failed run waits this long for Spark to cancel its tasks
WATCH_EVERY_S = 0.5  # the driver's loop looks at least this often (sooner when woken)


class RunStalled(RuntimeError):
    """No worker added an env step for the run's stall timeout."""


class StallWatch:
    """When the workers last added an env step. Once none has for the stall timeout, the run ends, resumable
    (no executor free, a cut network). With `starts_again` (data-parallel: a rank hung, not crashed, holds the
    others in their all-reduces, whose own timeout is longer, `ddq.spark.tasks`), a start of the stage that
    trained is started again instead, once; the next is given the stall timeout from the moment Spark has
    killed the hung task. A start that never trained, or one with no restart left, ends the run. Once the run
    stops, workers that have not ended are given the stall timeout (since their last step), then their stage
    is ended: a stop waited for Spark to give up on them before (a barrier stage short of task slots fails
    after 10 minutes, and is started again: the watch alone ends it)."""

    def __init__(self, steps: int, timeout_s: float, starts_again: bool, resume_hint: str):
        self.timeout_s, self.starts_again, self.resume_hint = timeout_s, starts_again, resume_hint
        self.moved_at, self.moved_steps = time.monotonic(), steps
        self.start_index, self.start_steps = 0, steps  # the job's start last seen, and the steps as it began
        self.ended: int | None = None  # the start this watch ended: one that goes on stalling ends the run

    def look(self, steps: int, job: SparkJob, stopping: bool) -> None:
        now = time.monotonic()
        if job.start_index != self.start_index:
            self.start_index, self.start_steps = job.start_index, steps
        if steps > self.moved_steps:
            self.moved_at, self.moved_steps = now, steps
        elif now - self.moved_at > self.timeout_s:
            why = f"no worker added an env step for {self.timeout_s:g} s"
            if stopping:  # told to stop, the workers neither ended nor played (hung, cut off, or never started:
                if self.ended != self.start_index:  # a barrier stage waiting for task slots): ended here, for good
                    print(f"ddq: {why} as the run stops (a worker hung, or cut off?): their Spark stage is ended",
                          file=sys.stderr, flush=True)
                    job.end_start(self.start_index, why)
                    self.ended = self.start_index
            elif (self.starts_again and steps > self.start_steps and self.ended != self.start_index
                  and job.start_again(self.start_index, f"{why}: a worker hung?")):
                self.ended, self.moved_at = self.start_index, now + job.kill_wait_s()
            else:
                raise RunStalled(f"{why} (are the workers' hosts reachable? is an executor free?); "
                                 f"{self.resume_hint}")


@dataclass
class Wiring:
    """What makes a distributed mode."""

    weights: WeightsService  # who owns the weights
    task: SparkTask  # what each Spark task runs
    evaluator: EvaluatorFactory  # when and what the driver evaluates
    barrier: bool = False  # the tasks form a barrier stage
    # a barrier stage whose workers stopped adding env steps is started again (`StallWatch`): they only wait on
    # each other, so one of them hung
    starts_again_when_stalled: bool = False


class Driver:
    """Runs one distributed training run, wired by `wiring`."""

    def __init__(self, config: TrainConfig, run_dir: str | Path, wiring: Wiring, launched: Launch,
                 started_at: float | None = None, resume: dict[str, Any] | None = None):
        """`launched`: the run as `ddq.modes.launch` started it (Spark starting meanwhile). `resume`: the
        checkpoint of an earlier run into `run_dir`; its counters (env steps, so epsilon, episodes,
        evaluations, wall time) continue, and the weights service resumes from its snapshots."""
        self.config, self.run_dir, self.wiring, self.launched = config, Path(run_dir), wiring, launched
        self.started_at = started_at if started_at is not None else time.time()
        self.run = launched.run
        self.placement = launched.placement
        self.redis_password = launched.redis_password  # the run's Redis's (`run_password`)
        seed_everything(config.agent.seed, config.agent.threads)
        device = resolve_device(config.agent.device)
        self.env_spec = env_spec(config.agent)
        self.state_shape = state_shape(self.env_spec.frame_shape, config.agent.frame_stack)
        self.mirror = WeightsMirror(config, make_learner(config.agent, self.env_spec.frame_shape,
                                                         self.env_spec.num_actions, device), device, self.run_dir,
                                    keep=self.wiring.weights.keep)
        log = open_run_log(config, self.run_dir, resume["counters"]["env_steps"] if resume else None)
        counters = resumed_counters(resume, self.run_dir) if resume else RunCounters()
        # the run's clock: from the command's start, less the earlier sessions of a resumed run
        self.record = RunRecord(config, log, counters, self.started_at - counters.wall_time_s)
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=100)  # for the progress bar
        self.next_log = next_mark(counters.env_steps, config.run.log_every)  # the next training point's env steps
        self.session_steps = counters.env_steps  # the run's env steps as this command began
        # the watch's loop looks now: an evaluation's result waits, the job ended, or a restarted Redis answers
        self.wake = threading.Event()
        self.supervisor = Supervisor()
        self.services = RunServices(config, self.run, self.run_dir, self.supervisor, redis_back=self.wake.set)
        self.signals = StopSignals()
        self.failure: str | None = None  # the one line that says what ended a run that could not go on
        self.exit_code = 0

    def train(self) -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.record.log)  # closed last, whatever ends the run: no event is lost
            starting = self.launched.spark
            stack.callback(starting.stop)
            stack.enter_context(self.signals)
            self._start_services(stack, starting)  # meanwhile Spark starts, on its own thread
            try:
                context = starting.result(lambda: self.signals.received is not None,
                                          self.config.distributed.stall_timeout)
                if context is None:  # the user stopped the run before Spark was ready
                    self.services.control.stop(StopReason.USER)
                else:
                    self._run_job(context, stack)
                    self.wiring.weights.drained()
                    self.mirror.evaluate(self.record, self.services, closing=True)
            except (ProcessFailed, SparkJobFailed, RunStalled) as error:
                self._cannot_go_on(str(error))
            except (StoreError, ConnectionError) as error:  # Redis gone: what died, else which error
                log = self.run_dir / "redis.log" if self.services.redis_watch else "the Redis server's log"
                self._cannot_go_on(snapshot_failure(error, log) or self._what_died()
                                   or f"{type(error).__name__}: {error}")
            summary = self._finish()
            with contextlib.suppress(StoreError):
                self.services.reporter.finish(summary)
                save_telemetry(self.services.redis, self.run, self.run_dir)  # for `ddq dashboard RUN_DIR`
        self.exit_code = 1 if self.failure else self.signals.exit_code()
        return summary

    def _cannot_go_on(self, failure: str) -> None:
        self.failure = failure
        print(f"ddq: error: the run cannot go on: {failure}", file=sys.stderr, flush=True)

    def _what_died(self) -> str | None:
        """The supervisor's line for a process of the run that died for good, if one did: a Redis error
        is often the first sign of the run's Redis dying (its keeper stops the driver's waiting for it
        before the supervisor's next look), and the line names more than the error."""
        watch = self.services.redis_watch
        if watch is None or watch.process.poll() is None:
            return None  # not the run's own Redis: the error says what happened
        try:
            self.supervisor.check(stopping=True)  # names the dead; restarts nothing
        except ProcessFailed as died:
            return str(died)
        return None

    def _start_services(self, stack: contextlib.ExitStack, spark: SparkStarting) -> None:
        """Redis (unless given) and the weights service, supervised; the mirror of the weights, the evaluator, a
        first checkpoint (a driver killed now leaves a run to resume). Celery and the dashboard: `_run_job`."""
        weights, flat = self.wiring.weights, self.mirror.learner.flat
        info = {"run": self.run, "started": self.started_at, "run_dir": str(self.run_dir.resolve()),
                "network": network_info(flat.layout, flat.layout_hash(), self.state_shape)}
        self.services.open(stack, info, weights.slices, self.record.counters, self.placement.listen,
                           self.placement.advertise, self.redis_password)
        s = self.services
        weights.start(ServiceContext(s.settings, s.url, self.run, self.run_dir, s.redis, self.supervisor,
                                     s.remote_url, lambda: self.signals.received is not None))
        stack.callback(weights.stop)  # before waiting: a process that dies at start leaves none behind
        weights.serving()
        self.mirror.connect(stack, s.url, self.run, weights.slices)
        self.evaluator = self.wiring.evaluator(self.mirror, self.record, s, self.wake)
        stack.callback(self.evaluator.close)
        self.mirror.sync()
        self.mirror.save(self.record)

    def _run_job(self, spark: Any, stack: contextlib.ExitStack) -> None:
        """Runs the workers' tasks to the end of the run, watching over it meanwhile (`_watch`). Celery and the
        dashboard start as the job is handed to its thread, after Spark's start, which they had slowed by
        3.3-4.4 s on a one-core services host (test hosts, 2026-11-28). Nothing waits for the tasks, nor for
        the helpers to start: a short run could end before the watch's first look (a 4,000-step PQN run did,
        and played no evaluation meanwhile)."""
        c = self.config
        job = SparkJob(spark, self.wiring.task, c.distributed.workers, self.wiring.barrier, encode_settings(c),
                       split_password(self.services.remote_url)[0], self.run, on_end=self.wake.set)
        job.start()
        clean = False
        try:
            self.services.start_helpers(stack)
            self._watch(job)
            clean = job.error is None
        finally:  # a job that ended cleanly spent the budget (unless something stopped it before)
            self.evaluator.close()  # no more points: the run's last evaluation is the driver's own, next
            gone = self.services.redis_gone()  # if so, what follows fails at once instead of waiting for it
            with contextlib.suppress(StoreError):
                self.services.control.stop(budget_the_workers_spent(c, self.services.store) if clean
                                           else StopReason.FAILURE)
            if not clean:
                job.cancel()
            # tasks cut off from a Redis that is gone for good only wait for it: stopping Spark ends them
            job.join(None if clean else 0.0 if gone else JOB_CANCEL_WAIT_S)
        with contextlib.suppress(StoreError):
            self.services.control.mark_workers_finished()  # the weights' owner applies what they sent, then ends
        if job.error is not None:
            raise job.error

    def _watch(self, job: SparkJob) -> None:
        """While the job runs: supervise the processes, log episodes, evaluate, and stop at the target, the
        time budget or a signal (the workers stop at the step budget themselves)."""
        c, counters, s = self.config, self.record.counters, self.services
        reached = False
        stall = StallWatch(counters.env_steps, c.distributed.stall_timeout, self.wiring.starts_again_when_stalled,
                           f"ddq train --resume {self.run_dir} continues the run")
        with tqdm(total=c.run.total_steps, initial=counters.env_steps, unit="step", disable=not c.run.progress,
                  mininterval=1.0, dynamic_ncols=True) as bar:
            while job.is_alive():
                self.wake.wait(WATCH_EVERY_S)
                self.wake.clear()  # what wakes it from now on is seen by the next look
                try:
                    stopping = s.control.stopping()
                except StoreError:
                    stopping = False  # the supervisor names what died, if it is ours
                if (news := s.announce_helpers()) is not None:
                    bar.write(news, file=sys.stderr)  # above the progress bar, which it redraws
                    sys.stderr.flush()
                self.supervisor.check(stopping)
                s.reporter.record_restarts(self.supervisor.restarts())
                s.reporter.record_evaluation_lag(self.evaluator.lag_s)
                steps = s.store.counts_at_least(counters.env_steps, counters.episodes)
                bar.update(min(steps, c.run.total_steps) - bar.n)  # past the total, tqdm would drop the percentage
                counters.env_steps = steps
                stall.look(steps, job, stopping)
                counters.wall_time_s = time.time() - self.record.origin
                log_new_episodes(self.services, self.record, self.recent_returns)
                epsilon = self.wiring.weights.workers_epsilon(steps)
                progress = s.reporter.record_progress(steps, epsilon, force=steps >= self.next_log)
                if steps >= self.next_log and progress is not None:
                    self.next_log = next_mark(steps, c.run.log_every)
                    log_training_point(self.record, steps, epsilon, progress)
                recent = sum(self.recent_returns) / len(self.recent_returns) if self.recent_returns else None
                bar.set_postfix(progress_values(recent, epsilon, self.record.last_eval, self.env_spec.score),
                                refresh=False)
                reached = self.evaluator.periodic(steps, stopping) or reached
                reason = stop_reason(None, c.run.total_steps, reached, c.run.time_budget_s, self.started_at,
                                     user_stopped=self.signals.received is not None,
                                     episodes=counters.episodes, total_episodes=c.run.total_episodes)
                if reason is not None and not stopping:
                    s.control.stop(reason)

    def _finish(self) -> dict[str, Any]:
        """Summary, progress point and checkpoint: from the weights service when it is there, from the
        driver's mirror (as of the last evaluation) when the run failed. The summary's workers are every
        attempt's last report (a killed attempt's steps and pushes count too): the newest of what Redis
        holds and what the reporter read, which is all there is with Redis gone. `gradients_received`:
        the downpour pushes that reached Redis, which bound the updates applied when no gradient is
        applied twice (a worker's own count can lag by its last heartbeat; a Redis restored from its
        snapshot counts from the snapshot's value). `account`: the exact one (`sender_account`)."""
        counters, s = self.record.counters, self.services
        workers, received, account = s.reporter.workers, None, None
        counters.wall_time_s = time.time() - self.record.origin
        with contextlib.suppress(StoreError):
            workers = newest_rows(workers, worker_rows(s.store))
            # the workers' last steps: a job can end between two of the watch's reads (a fast PQN run did), and a
            # Redis restored from its snapshot as they ended forgot what they counted since, which their last rows
            # (each attempt's steps, written as it ended) still hold
            counters.env_steps = max(counters.env_steps, s.store.env_steps(), self.session_steps + played(workers))
            received = s.store.pushes()  # counted by Redis as each push arrived
            account = sender_account(shard_reports(s.store, self.wiring.weights.slices))
            log_new_episodes(self.services, self.record, self.recent_returns)
            epsilon = self.wiring.weights.workers_epsilon(counters.env_steps)
            progress = s.reporter.record_progress(counters.env_steps, epsilon, force=True)
            # a mark the workers passed after the watch's last look (most short runs' last): the point it would
            # have logged, though no worker runs now to give the rates of their last second
            if progress is not None and counters.env_steps >= self.next_log:
                log_training_point(self.record, counters.env_steps, epsilon, progress)
        path = self.mirror.save(self.record)
        reason = f"{StopReason.FAILURE.value}: {self.failure}" if self.failure else s.control.reason()
        summary = run_summary(self.config, counters, self.record.last_eval, self.mirror.version, path, reason)
        summary.update(stopped_by=self.signals.received, restarts=self.supervisor.restarts(), workers=workers,
                       gradients_received=received, account=account, evaluation_lag_s=self.evaluator.lag_s,
                       evaluation_points_skipped=self.evaluator.skipped,
                       **lost_and_redone(workers))
        self.record.log.write_summary(summary)
        return summary


def snapshot_failure(error: BaseException, log: Path | str) -> str | None:
    """The line for a Redis that refuses writes because it cannot save its snapshot (Redis' own words are four
    sentences: one, and where to look); None for another error."""
    if not snapshot_failed(error):
        return None
    return f"the run's Redis cannot save its snapshot (a full disk?) and refuses writes until it can; see {log}"


def log_training_point(record: RunRecord, steps: int, epsilon: float, progress: dict[str, Any]) -> None:
    """Logs a training point at `steps`: the telemetry's `progress` point, as the dashboard shows it."""
    record.note_training(steps, progress["updates"], epsilon, **{key: progress[key] for key in (
        "env_steps_per_s", "updates_per_s", "loss", "mean_max_q", "staleness", "policy_lag")})


def log_new_episodes(services: RunServices, record: RunRecord, recent_returns: collections.deque[float]) -> None:
    """Logs the episodes the workers finished since the last call, and keeps their returns in `recent_returns`."""
    def whole(episode: dict, name: str) -> int | None:  # a count: from 0 to 2**53 (TensorBoard's step is int64)
        number = finite_number(episode.get(name))
        return int(number) if number is not None and 0 <= number < 2**53 else None

    for episode in services.episodes.read_new():  # a worker's JSON, read as data: what is not a number is None
        record.counters.episodes += 1
        returned = finite_number(episode.get("episode_return"))
        recent_returns.append(returned or 0.0)
        steps = whole(episode, "env_steps")
        record.log.write("episode", env_steps=record.counters.env_steps if steps is None else steps,
                         worker=whole(episode, "worker"), episode_return=returned, length=whole(episode, "length"),
                         truncated=episode.get("truncated") is True)


def budget_the_workers_spent(config: TrainConfig, store: RunStore) -> StopReason:
    """The budget a run's workers stopped at, by its counts in Redis: the episode budget's, which they can reach
    before the driver reads their last episodes, or the step budget's."""
    run = config.run
    return budget_spent(store.env_steps(), run.total_steps, store.episode_count(), run.total_episodes) \
        or StopReason.BUDGET
