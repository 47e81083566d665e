"""Actor-learner training: N Spark tasks only play and send experience, one learner process trains.

The wiring of Grandio's "Distributed Deep Q-Learning algorithm based on MPI"
(one process trains, the others simulate and share experience) and of Ape-X
(Horgan et al. 2018). Each Spark task runs an `ExperienceActor`; the one
`ddq learner` process owns the replay memory and the optimizer, trains at the
replay ratio and publishes weights where workers read them. The driver
evaluates, beside the run, the weights the learner kept at each eval_every
mark of the env steps it trained on. With --sync the tasks form a barrier
stage and meet between rounds in its process group (the MPI collective variant). A dead learner
is restarted from its snapshot; a dead task is retried by Spark.
"""

from __future__ import annotations

from ddq.config import TrainConfig, workers_start_together
from ddq.core.agent import epsilon_schedule
from ddq.modes.driver import Wiring
from ddq.modes.evaluators import PointEvaluator
from ddq.modes.weights_service import LearnerProcess
from ddq.spark.tasks import actor_task


def actor_learner(config: TrainConfig, resumed_env_steps: int = 0) -> Wiring:
    distributed = config.distributed
    learner = LearnerProcess(epsilon_schedule(config.agent), distributed.workers, distributed.per_actor_epsilon,
                             resumed_env_steps)
    return Wiring(weights=learner, task=actor_task, evaluator=PointEvaluator,
                  barrier=workers_start_together(config.run.mode, distributed.sync))
