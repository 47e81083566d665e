"""Q-network builders: an MLP for vector observations, the original DeepQ conv net, Nature-DQN."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn


class ScaleBytes(nn.Module):
    """Turns uint8 pixels into floats in [0, 1] inside the network, so frames travel as bytes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().mul_(1.0 / 255.0) if x.dtype == torch.uint8 else x.float()


def mlp(input_dim: int, num_actions: int, hidden: Sequence[int] = (256, 256)) -> nn.Sequential:
    """Fully connected Q-network for vector observations (CartPole) or small flattened images."""
    layers: list[nn.Module] = [ScaleBytes(), nn.Flatten()]
    width = input_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_actions))
    return nn.Sequential(*layers)


def _pooled(size: int, times: int) -> int:
    # Caffe pools with ceil rounding; so does this network, to keep its shapes.
    for _ in range(times):
        size = math.ceil(size / 2)
    return size


def deepq(channels: int, height: int, width: int, num_actions: int) -> nn.Sequential:
    """The original ddq network: conv 32 7x7 - pool - conv 64 5x5 - pool - conv 64 3x3 - pool - fc 512.

    At 4x16x16 input and 4 actions it has the original's 228,132 parameters.
    """
    pool = dict(kernel_size=2, stride=2, ceil_mode=True)
    flat = 64 * _pooled(height, 3) * _pooled(width, 3)
    return nn.Sequential(
        ScaleBytes(),
        nn.Conv2d(channels, 32, 7, padding=3), nn.ReLU(), nn.MaxPool2d(**pool),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(**pool),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(**pool),
        nn.Flatten(), nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, num_actions),
    )


def nature_dqn(channels: int, height: int, width: int, num_actions: int) -> nn.Sequential:
    """Mnih et al. (2015): conv 32 8x8/4 - conv 64 4x4/2 - conv 64 3x3/1 - fc 512, for 84x84 Atari."""
    def out(size: int) -> int:
        for kernel, stride in ((8, 4), (4, 2), (3, 1)):
            size = (size - kernel) // stride + 1
        return size

    return nn.Sequential(
        ScaleBytes(),
        nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * out(height) * out(width), 512), nn.ReLU(),
        nn.Linear(512, num_actions),
    )


MODEL_NAMES = ("auto", "mlp", "deepq", "nature")


def build_q_network(name: str, state_shape: tuple[int, ...], num_actions: int,
                    hidden: Sequence[int] = (256, 256)) -> nn.Module:
    """A Q-network by name for states of `state_shape` (frames stacked first).

    "auto" picks the MLP for vector states, Nature-DQN for 84x84 frames and
    the original DeepQ net for other images.
    """
    image = len(state_shape) == 3
    if name == "auto":
        name = ("nature" if state_shape[1:] == (84, 84) else "deepq") if image else "mlp"
    if name == "mlp":
        return mlp(math.prod(state_shape), num_actions, hidden)
    if name in ("deepq", "nature"):
        if not image:
            raise ValueError(f"model {name!r} needs image states (frames, height, width), got {state_shape}")
        builder = deepq if name == "deepq" else nature_dqn
        return builder(*state_shape, num_actions)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
