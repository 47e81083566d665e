"""The optimizers' settings: which update rule, its learning rate and constants, Caffe's lr policy.

Kept apart from the arithmetic (`ddq.core.optimizers`) and free of torch, so reading a run's
settings (`ddq.config`, the command line's --help) does not load torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddq.config.checks import fraction, positive, positive_or_none

OPTIMIZERS = ("sgd", "nesterov", "rmsprop", "adagrad", "adadelta", "adam")


@dataclass
class OptimizerConfig:
    """Optimizer settings, with Caffe solver's learning-rate policy (fixed or step)."""

    optimizer: str = field(default="adam", metadata={
        "help": "update rule: " + ", ".join(OPTIMIZERS) + " (nesterov: sgd with Nesterov momentum; set momentum)"})
    lr: float = field(default=1e-3, metadata={"help": "base learning rate", "brief": True})
    momentum: float = field(default=0.0, metadata={"help": "momentum (sgd, nesterov, rmsprop)"})
    weight_decay: float = field(default=0.0, metadata={"help": "L2 weight decay"})
    rms_decay: float = field(default=0.99, metadata={"help": "RMSprop smoothing constant"})
    centered: bool = field(default=False, metadata={
        "help": "RMSprop: divide by the gradient's running variance, not its running second moment (Graves 2013)"})
    beta1: float = field(default=0.9, metadata={"help": "Adam first-moment decay"})
    beta2: float = field(default=0.999, metadata={"help": "Adam second-moment decay"})
    rho: float = field(default=0.9, metadata={
        "help": "AdaDelta: decay of its running averages of squared gradients and steps (Caffe's momentum)"})
    eps: float | None = field(default=None, metadata={"help": "denominator epsilon (none: torch's default)"})
    lr_policy: str = field(default="fixed",
                           metadata={"help": "fixed, or step: lr * lr_gamma ** (updates // lr_stepsize)"})
    lr_gamma: float = field(default=0.1, metadata={"help": "step policy's factor"})
    lr_stepsize: int = field(default=100_000, metadata={"help": "step policy's interval in updates"})

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
        if self.lr_policy not in ("fixed", "step"):
            raise ValueError(f"unknown lr_policy {self.lr_policy!r}; choose fixed or step")
        positive(self, "lr", "lr_stepsize")
        if self.centered and self.optimizer != "rmsprop":
            raise ValueError(f"centered is a setting of rmsprop, not of {self.optimizer}")
        fraction(self, "rho")
        positive_or_none(self, "eps")

    @property
    def epsilon(self) -> float:
        if self.eps is not None:
            return self.eps
        return {"adagrad": 1e-10, "adadelta": 1e-6}.get(self.optimizer, 1e-8)
