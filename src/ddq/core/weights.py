"""Where an actor's weights come from and where its gradients go: the one interface every mode wires.

In the spirit of Acme's VariableSource / VariableClient. A worker holds a
learner (an online and a target network over flat parameters) and a
`ParameterSource`; it trains by

    stats = replay_gradient(learner, batch)   # the algorithm's loss: its gradient lands in learner.flat.grad
    source.push(learner.flat.grad, ...)       # somebody applies it
    source.sync()                             # the newest weights (and target) are now in the learner

and never knows whether the source is `LocalParameters` (serial mode: the
learner's own optimizer applies the step at once) or the Redis parameter
server's client (downpour: shards apply it and publish the weights).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from ddq.core.learner import Learner


class WeightsSource(Protocol):
    """Keeps a learner's online (and target) weights up to date with wherever they live."""

    @property
    def version(self) -> int:
        """Updates applied to the weights last synced."""
        ...

    def sync(self) -> bool:
        """Brings the weights (and the target's) up to date; True if they moved."""
        ...


class ParameterSource(WeightsSource, Protocol):
    """A weights source that also takes the gradients computed against its weights."""

    @property
    def waits(self) -> int:
        """Times a push waited for the source to catch up (a remote server's backlog)."""
        ...

    @property
    def pushes(self) -> int:
        """Gradients that left for where they are applied (gradients merged into one push count once)."""
        ...

    def push(self, grad: torch.Tensor | np.ndarray, samples: int = 0, loss: float = 0.0) -> None:
        """Hands over one flat gradient computed from the weights of the last sync."""
        ...

    def close(self) -> None:
        ...


class LocalParameters:
    """The learner's own weights: a pushed gradient is applied at once by the learner's optimizer
    (which also refreshes the target every C updates), so `sync` has nothing to fetch."""

    def __init__(self, learner: Learner):
        self.learner = learner
        self.waits = 0  # applied at once: a push never waits
        self.pushes = 0

    @property
    def version(self) -> int:
        return self.learner.updates

    def sync(self) -> bool:
        return False

    def push(self, grad: torch.Tensor | np.ndarray, samples: int = 0, loss: float = 0.0) -> None:
        if grad is not self.learner.flat.grad:
            self.learner.flat.grad.copy_(torch.as_tensor(grad))
        self.learner.apply_gradient()
        self.pushes += 1

    def close(self) -> None:
        pass

