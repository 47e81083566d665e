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
import time
from pathlib import Path
from typing import Any

from ddq.core.dqn import per_actor_epsilon
from ddq.learner_process.launch import start_learner
from ddq.modes.downpour import DownpourTrainer
from ddq.modes.spark import actor_task
from ddq.param_server.launch import stop_shards, wait_until_serving


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
