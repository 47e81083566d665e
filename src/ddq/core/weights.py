"""Where an actor's weights come from and where its gradients go: the one interface every mode wires.

In the spirit of Acme's VariableSource / VariableClient. A worker holds a
learner (an online and a target network over flat parameters) and a
`ParameterSource`; it trains by

    stats = learner.compute_gradient(batch)   # the gradient lands in learner.flat.grad
    source.push(learner.flat.grad, ...)       # somebody applies it
    source.sync()                             # the newest weights (and target) are now in the learner

and never knows whether the source is `LocalParameters` (serial mode: the
learner's own optimizer applies the step at once) or the Redis parameter
server's client (downpour: shards apply it and publish the weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from ddq.core.learner import GradientStats, Learner
from ddq.core.replay import ReplayMemory, sample_batch, update_priorities


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

    waits: int  # times a push waited for the source to catch up (a remote server's backlog)

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

    @property
    def version(self) -> int:
        return self.learner.updates

    def sync(self) -> bool:
        return False

    def push(self, grad: torch.Tensor | np.ndarray, samples: int = 0, loss: float = 0.0) -> None:
        if grad is not self.learner.flat.grad:
            self.learner.flat.grad.copy_(torch.as_tensor(grad))
        self.learner.apply_gradient()

    def close(self) -> None:
        pass


def train_from_replay(learner: Learner, replay: ReplayMemory | Sequence[ReplayMemory], source: ParameterSource,
                      updates: int, batch_size: int, beta: float = 1.0) -> list[GradientStats]:
    """`updates` rounds of: sample a minibatch (shown through `learner.augmentation`, if the run has one),
    compute its gradient against the current weights, push it to `source`, sync (and, with prioritized
    replay, give the batch the priorities of its new TD errors; `beta` is the importance weights' exponent
    now). The one training step of every mode; returns each gradient's statistics."""
    memories = [replay] if isinstance(replay, ReplayMemory) else replay
    stats = []
    for _ in range(updates):
        batch = sample_batch(memories, batch_size, beta)
        if learner.augmentation is not None:
            batch = learner.augmentation(batch)
        gradient = learner.compute_gradient(batch)
        source.push(learner.flat.grad, samples=batch_size, loss=gradient.loss)
        source.sync()
        if batch.positions is not None and gradient.td_errors is not None:
            update_priorities(memories, batch.positions, gradient.td_errors)
        stats.append(gradient)
    return stats
