"""Actor-learner training driven by Spark: N tasks only play and send experience, one learner trains.

The wiring of Grandio's "Distributed Deep Q-Learning algorithm based on MPI"
(one process trains, the others simulate and share experience) and of Ape-X
(Horgan et al. 2018), built from the same parts as
downpour: the driver is downpour's (services, supervision, evaluation, stop
reasons, summary, resume); what differs is who owns the weights (one
`ddq learner` process instead of parameter-server shards, restarted from its
snapshot when it dies) and what a Spark task runs (an `ExperienceActor`
instead of a gradient-pushing Barista).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from ddq.core.dqn import per_actor_epsilon
from ddq.learner_process.launch import start_learner
from ddq.modes.background_eval import BackgroundEvaluations
from ddq.modes.bookkeeping import note_evaluation
from ddq.modes.downpour import DownpourTrainer
from ddq.modes.spark import actor_task
from ddq.param_server.launch import stop_shards, wait_until_serving
from ddq.services.telemetry import record_evaluation
from ddq.transport.eval_points import PointReader
from ddq.transport.wire import layout_bytes


class ActorLearnerTrainer(DownpourTrainer):
    """The driver of `ddq train --mode actor-learner`."""

    SPARK_TASK = staticmethod(actor_task)

    def _start_weights_service(self, stack: contextlib.ExitStack, settings: Path, url: str) -> None:
        """The learner, supervised (restarted from its snapshot when it dies) and stopped with the run.
        A resumed run's epsilon goes on from the env steps it had trained on."""
        self.redis.set(self.keys.trained_steps, self.counters.env_steps, nx=True)

        def restart() -> object:
            return start_learner(settings, url, self.run, self.run_dir)

        self.shards = [self.supervisor.watch("the learner", restart(), self.run_dir / "learner.log",  # type: ignore[arg-type]
                                             restart=restart)]  # type: ignore[arg-type]
        stack.callback(lambda: stop_shards(self.redis, self.run, [entry.process for entry in self.shards]))
        wait_until_serving(self.redis, self.run, 1, [entry.process for entry in self.shards])
        self.points = PointReader(self.redis, self.keys.eval_points, layout_bytes(self.learner.flat.layout_hash()),
                                  self.learner.flat.size)
        self.background = BackgroundEvaluations(self.learner.online, self.config, self.device)
        stack.callback(self.background.close)

    def _periodic_evaluation(self, env_steps: int, stopping: bool) -> bool:
        """Evaluates every evaluation point the learner published (its weights at each eval_every mark of the
        env steps it trained on), beside the run and in order; True once one reached the target return.
        A point is logged at the env steps the actors had played when it was published."""
        if not stopping:
            for point in self.points.read_new():
                self.background.submit(point, self.counters.evaluations + self.background.pending())
            for line in self.points.refused:
                print(f"ddq: warning: {line}", file=sys.stderr, flush=True)
            self.points.refused.clear()
        reached = recorded = False
        for point, result in self.background.finished():
            self.last_eval, hit = note_evaluation(result, self.config, self.log, self.counters, point.env_steps,
                                                  point.version, self.origin, trained_steps=point.trained_steps)
            record_evaluation(self.redis, self.keys, "driver", point.version, point.env_steps, result.mean_return,
                              [], mean_rewarded_steps=result.mean_rewarded_steps)
            reached, recorded = reached or hit, True
        if recorded:  # as downpour's evaluations do: a driver killed now leaves a run to resume
            self.client.sync()
            self._save_checkpoint()
        return reached

    def _stage(self, rdd: Any) -> Any:
        """--sync: a barrier stage (Spark's barrier execution): its tasks start together, meet at the barrier
        between rounds, and a failed one restarts them all, as the collective variant wants."""
        return rdd.barrier() if self.config.sync else rdd

    def _workers_epsilon(self, env_steps: int) -> float:
        """The schedule at the env steps the learner has trained on (what the actors read), or the mean of
        Ape-X's fixed per-actor values."""
        if self.config.per_actor_epsilon:
            actors = self.config.workers
            return sum(per_actor_epsilon(i, actors) for i in range(actors)) / actors
        return self.epsilon(int(self.redis.get(self.keys.trained_steps) or 0))

    def _wait_for_drained_queues(self, timeout: float = 120.0) -> None:
        """Until the learner has trained on everything the actors sent and exited, as it does once the run
        stops (it publishes its final weights first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.shards[0].process.poll() is None:
            time.sleep(0.05)
