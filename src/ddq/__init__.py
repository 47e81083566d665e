"""ddq: distributed Deep Q-learning (Spark workers, a Redis parameter server, PyTorch).

    import ddq
    run = ddq.train(env="CartPole-v1", mode="serial", target_return=475)
    agent = ddq.load(run.run_dir)
    action = agent.act(observation)
"""

import ddq.gamesim  # noqa: F401  (registers ddq/Snake-v0 with Gymnasium)
from ddq.api import Agent, Run, TrainingFailed, load, train

__version__ = "0.1.0"
__all__ = ["Agent", "Run", "TrainingFailed", "load", "train"]
