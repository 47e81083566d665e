"""SGD (plain or Nesterov), RMSprop, AdaGrad, AdaDelta and Adam, written once over a flat float32 vector.

The serial learner and the parameter server apply exactly these updates.
Each matches its torch.optim namesake's arithmetic (tested against it), works
in place on preallocated state and scratch buffers, and so allocates nothing
per step: on a multi-megabyte vector, fresh allocations cost more than the
arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import torch

from ddq.config.optimizer import OPTIMIZERS, OptimizerConfig

__all__ = ["OPTIMIZERS", "FlatOptimizer", "OptimizerConfig"]

def state_names(config: OptimizerConfig) -> tuple[str, ...]:
    """The running averages `config`'s update rule keeps, each a vector the size of the parameters."""
    momentum = ("momentum",) if config.momentum else ()
    if config.optimizer in ("sgd", "nesterov"):
        return momentum
    if config.optimizer == "rmsprop":
        return ("square_avg", *(("grad_avg",) if config.centered else ()), *momentum)
    return {"adagrad": ("sum",), "adadelta": ("square_avg", "acc_delta"),
            "adam": ("exp_avg", "exp_avg_sq")}.get(config.optimizer, ())


class FlatOptimizer:
    """Applies one optimizer's updates in place to a flat parameter vector."""

    def __init__(self, config: OptimizerConfig, size: int, device: torch.device | str = "cpu",
                 lr_mult: torch.Tensor | None = None, decay_mult: torch.Tensor | None = None):
        """`lr_mult`/`decay_mult`: optional per-element multipliers of the step and the weight decay,
        as Caffe's per-blob `lr_mult`/`decay_mult` (None: all ones, at no cost)."""
        self.config = config
        self.lr_mult, self.decay_mult = lr_mult, decay_mult
        self.steps = 0
        zeros = lambda: torch.zeros(size, dtype=torch.float32, device=device)  # noqa: E731
        self.state: dict[str, torch.Tensor] = {name: zeros() for name in state_names(config)}
        self._scratch = zeros()
        self._root = zeros() if config.optimizer == "adadelta" else None  # AdaDelta divides one root by another
        self._decayed = zeros() if config.weight_decay else None
        self._weighted = zeros() if lr_mult is not None else None

    def learning_rate(self) -> float:
        """The learning rate of the next step under the lr policy."""
        c = self.config
        if c.lr_policy == "step":
            return c.lr * c.lr_gamma ** (self.steps // c.lr_stepsize)
        return c.lr

    def step(self, params: torch.Tensor, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        """params -= update(grad). `grad` is left untouched; `lr_scale` scales this step only."""
        c, s = self.config, self.state
        lr = self.learning_rate() * lr_scale
        self.steps += 1
        g = grad
        if c.weight_decay and self.decay_mult is not None:
            g = torch.mul(params, self.decay_mult, out=self._decayed).mul_(c.weight_decay).add_(grad)
        elif c.weight_decay:
            g = torch.add(grad, params, alpha=c.weight_decay, out=self._decayed)
        if c.optimizer in ("sgd", "nesterov"):
            if c.momentum:
                s["momentum"].mul_(c.momentum).add_(g)
                # Nesterov steps by g + momentum * the new velocity, as torch does. Caffe keeps lr inside its
                # history (h = momentum * h + lr * g) and steps (1 + momentum) * h - momentum * h_old: the same
                # step while lr holds, but after a step-policy drop its history carries the old lr a while.
                # Here, as in plain SGD (and Caffe's SGD differs alike), the current lr scales the whole step.
                # With no momentum both are plain SGD (torch refuses that; Caffe runs it).
                g = torch.add(g, s["momentum"], alpha=c.momentum, out=self._scratch) \
                    if c.optimizer == "nesterov" else s["momentum"]
            params.add_(self._per_element(g), alpha=-lr)
        elif c.optimizer == "rmsprop":
            s["square_avg"].mul_(c.rms_decay).addcmul_(g, g, value=1 - c.rms_decay)
            second_moment = s["square_avg"]
            if c.centered:  # E[g^2] - E[g]^2: the variance, in the scratch buffer _denominator then uses
                s["grad_avg"].mul_(c.rms_decay).add_(g, alpha=1 - c.rms_decay)
                second_moment = torch.addcmul(s["square_avg"], s["grad_avg"], s["grad_avg"], value=-1,
                                              out=self._scratch)
            denom = self._denominator(second_moment, 1.0)
            if c.momentum:
                s["momentum"].mul_(c.momentum).addcdiv_(g, denom)
                params.add_(self._per_element(s["momentum"]), alpha=-lr)
            else:
                params.addcdiv_(self._per_element(g), denom, value=-lr)
        elif c.optimizer == "adagrad":
            s["sum"].addcmul_(g, g, value=1.0)
            params.addcdiv_(self._per_element(g), self._denominator(s["sum"], 1.0), value=-lr)
        elif c.optimizer == "adadelta":
            # step = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g, in torch's order. Caffe's AdaDelta is
            # this update (its momentum is rho, its delta eps), taking one root of the quotient instead: the
            # same value within rounding. Both keep lr (and lr_mult) out of acc_delta, applying it last.
            s["square_avg"].mul_(c.rho).addcmul_(g, g, value=1 - c.rho)
            root = torch.add(s["square_avg"], c.epsilon, out=self._root).sqrt_()
            delta = torch.add(s["acc_delta"], c.epsilon, out=self._scratch).sqrt_().div_(root).mul_(g)
            s["acc_delta"].mul_(c.rho).addcmul_(delta, delta, value=1 - c.rho)
            params.add_(self._per_element(delta), alpha=-lr)
        else:  # adam
            s["exp_avg"].mul_(c.beta1).add_(g, alpha=1 - c.beta1)
            s["exp_avg_sq"].mul_(c.beta2).addcmul_(g, g, value=1 - c.beta2)
            bias1 = 1 - c.beta1 ** self.steps
            bias2 = 1 - c.beta2 ** self.steps
            denom = self._denominator(s["exp_avg_sq"], 1 / math.sqrt(bias2))
            params.addcdiv_(self._per_element(s["exp_avg"]), denom, value=-lr / bias1)

    def _per_element(self, update: torch.Tensor) -> torch.Tensor:
        """`update` times the per-element lr multipliers (Caffe scales the final step, after any
        adaptive normalisation), in a scratch buffer; `update` itself when there are none."""
        if self.lr_mult is None:
            return update
        return torch.mul(update, self.lr_mult, out=self._weighted)

    def _denominator(self, second_moment: torch.Tensor, scale: float) -> torch.Tensor:
        """sqrt(second_moment) * scale + eps, in the scratch buffer."""
        out = torch.sqrt(second_moment, out=self._scratch)
        if scale != 1.0:
            out.mul_(scale)
        return out.add_(self.config.epsilon)

    def state_dict(self) -> dict:
        return {"config": asdict(self.config), "steps": self.steps,
                "state": {k: v.clone() for k, v in self.state.items()}}

    def load_state_dict(self, saved: dict) -> None:
        if saved["config"]["optimizer"] != self.config.optimizer:
            raise ValueError(f"optimizer state is for {saved['config']['optimizer']}, not {self.config.optimizer}")
        if set(saved["state"]) != set(self.state):
            raise ValueError(f"optimizer state holds {', '.join(sorted(saved['state']))}, but these settings keep "
                             f"{', '.join(sorted(self.state)) or 'none'} (momentum or centered changed?)")
        self.steps = int(saved["steps"])
        for key, value in saved["state"].items():
            self.state[key].copy_(value)
