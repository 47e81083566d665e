"""The learner: a Q-network and its target, turning an algorithm's loss into flat gradients and updates.

An algorithm (`ddq.core.algorithms`) computes its loss with the learner's networks and hands it to
`gradient_of`; every mode then hands `flat.grad` to its parameter source (`ddq.core.weights`): in serial
mode that source is this learner's own optimizer (`apply_gradient`); in downpour, the parameter server's
shards, which apply the same `FlatOptimizer`. Either way the arithmetic is the core's.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddq.config import PRECISIONS
from ddq.core.dqn import target_refresh_due
from ddq.core.optimizers import FlatOptimizer, OptimizerConfig
from ddq.core.symmetry import SymmetryAugmentation
from ddq.models import FlatParameters

# The mean max-Q and the gradient norm are telemetry: each costs about 20 us on CPU (a fiftieth of a small
# MLP's update, and a host synchronisation on a GPU), so the learner reports them on every 8th gradient.
# With clipping on (max_grad_norm, the default) the norm is still computed for every gradient, to clip it.
STATISTICS_EVERY = 8


@dataclass
class GradientStats:
    loss: float
    mean_max_q: float | None  # None on gradients the learner did not measure (see STATISTICS_EVERY)
    grad_norm: float | None  # the same; before clipping
    td_errors: np.ndarray | None = None  # |delta| per transition, for prioritized replay (its batches only)


class Learner:
    """Online and target Q-networks over flat parameters, plus a flat optimizer."""

    def __init__(self, network: nn.Module, optim: OptimizerConfig, gamma: float, target_update: int,
                 max_grad_norm: float | None = None, device: str | torch.device = "cpu",
                 double_dqn: bool = True, precision: str = "fp32", statistics_every: int = STATISTICS_EVERY):
        """`double_dqn` False gives the original DQN target (max over the target network's values);
        `precision` "bf16" runs forward and backward under bfloat16 autocast (weights stay float32);
        `statistics_every` k: the telemetry-only statistics are measured on gradients 1, k + 1, 2k + 1, ..."""
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
        if statistics_every < 1:
            raise ValueError(f"statistics_every must be at least 1, not {statistics_every}")
        self.device = torch.device(device)
        self.double_dqn = double_dqn
        self.precision = precision
        self.online = network.to(self.device)
        self.target = copy.deepcopy(self.online)
        self.flat = FlatParameters(self.online)
        self.target_flat = FlatParameters(self.target)
        self.optimizer = FlatOptimizer(optim, self.flat.size, self.device, self.flat.multipliers("lr_mult"),
                                       self.flat.multipliers("decay_mult"))
        self.gamma = gamma
        self.target_update = target_update
        self.max_grad_norm = max_grad_norm
        self.updates = 0
        self.statistics_every = statistics_every
        self.gradients = 0  # computed, whether or not applied here
        # What the training step shows each minibatch through before its gradient (board symmetries), or None.
        self.augmentation: SymmetryAugmentation | None = None

    def to_tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device, non_blocking=True)

    def gradient_of(self, loss: torch.Tensor, q_values: torch.Tensor) -> GradientStats:
        """Backpropagates an algorithm's `loss` (computed from `q_values`, the online network's on the
        minibatch) into `self.flat.grad`, clips its norm, and measures what is due."""
        self.flat.zero_grad()
        loss.backward()
        measured = self.gradients % self.statistics_every == 0
        self.gradients += 1
        grad_norm = float(self.flat.grad.norm()) if measured or self.max_grad_norm is not None else None
        if self.max_grad_norm is not None and grad_norm is not None and grad_norm > self.max_grad_norm:
            self.flat.grad.mul_(self.max_grad_norm / grad_norm)
        mean_max_q = float(q_values.detach().max(dim=1).values.mean()) if measured else None
        return GradientStats(float(loss.detach()), mean_max_q, grad_norm if measured else None)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Where an algorithm runs the networks forward: bfloat16 autocast under precision bf16."""
        # A disabled torch.autocast still costs about 10 us to enter and leave: a tenth of a small MLP's update.
        if self.precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def apply_gradient(self) -> None:
        """One optimizer step with `self.flat.grad`; refreshes the target every `target_update` steps."""
        self.optimizer.step(self.flat.data, self.flat.grad)
        self.updates += 1
        if target_refresh_due(self.updates, self.target_update):
            self.refresh_target()

    def refresh_target(self) -> None:
        self.target_flat.data.copy_(self.flat.data)

    def state_dict(self) -> dict:
        return {"online": self.flat.data.cpu().clone(), "target": self.target_flat.data.cpu().clone(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates,
                "layout": self.flat.layout_hash()}

    def load_state_dict(self, saved: dict) -> None:
        if saved["layout"] != self.flat.layout_hash():
            raise ValueError("checkpoint was saved from a different network layout")
        self.flat.data.copy_(saved["online"])
        self.target_flat.data.copy_(saved["target"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.updates = int(saved["updates"])
