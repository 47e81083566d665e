"""ddq: distributed Deep Q-learning (Spark workers, a Redis parameter server, PyTorch)."""

import ddq.gamesim  # noqa: F401  (registers ddq/Snake-v0 with Gymnasium)

__version__ = "0.1.0"
