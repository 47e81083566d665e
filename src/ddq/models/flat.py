"""A module's parameters and gradients as views into two contiguous float32 vectors.

Every mode moves parameters and gradients as flat vectors (the optimizers,
the wire format, checkpoints). Making the module's tensors views into one
preallocated buffer means flattening costs nothing: no torch.cat per step.
"""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import torch
from torch import nn


class FlatParameters:
    """Owns `data` and `grad`, flat vectors that `module`'s parameters and grads view."""

    def __init__(self, module: nn.Module):
        params = list(module.parameters())
        device = params[0].device
        self.size = sum(p.numel() for p in params)
        self.data = torch.empty(self.size, dtype=torch.float32, device=device)
        self.grad = torch.zeros(self.size, dtype=torch.float32, device=device)
        self.layout = [(name, tuple(p.shape)) for name, p in module.named_parameters()]
        self._multipliers = {name: [float(getattr(p, name, 1.0)) for p in params] for name in ("lr_mult", "decay_mult")}
        self._sizes = [p.numel() for p in params]
        offset = 0
        for p in params:
            n = p.numel()
            self.data[offset:offset + n].copy_(p.detach().reshape(-1))
            p.data = self.data[offset:offset + n].view_as(p)
            # Autograd accumulates in place into an existing .grad, so the
            # backward pass writes straight into the flat gradient.
            p.grad = self.grad[offset:offset + n].view_as(p)
            offset += n

    def assign(self, values: np.ndarray, offset: int = 0, into: torch.Tensor | None = None) -> None:
        """Copies float32 `values` (e.g. a read-only view of a received message) into the parameters
        (or into `into`, a vector of the same size), starting at `offset`."""
        target = (self.data if into is None else into)[offset:offset + len(values)]
        if target.device.type == "cpu":
            np.copyto(target.numpy(), values)
        else:
            with warnings.catch_warnings():  # torch warns about read-only arrays; it only reads this one
                warnings.simplefilter("ignore", UserWarning)
                target.copy_(torch.from_numpy(values))

    def zero_grad(self) -> None:
        self.grad.zero_()

    def multipliers(self, name: str) -> torch.Tensor | None:
        """Per-element `lr_mult` or `decay_mult` (Caffe's per-blob multipliers), or None when all are 1."""
        per_param = self._multipliers[name]
        if all(m == 1.0 for m in per_param):
            return None
        values = torch.tensor(per_param, dtype=torch.float32, device=self.data.device)
        return values.repeat_interleave(torch.tensor(self._sizes, device=self.data.device))

    def layout_hash(self) -> str:
        """Identifies the parameter layout (names and shapes, in order)."""
        text = ";".join(f"{name}:{'x'.join(map(str, shape))}" for name, shape in self.layout)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
