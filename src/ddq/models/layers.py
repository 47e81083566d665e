"""Layers of ddq's own that every network starts with, built-in or imported from Caffe."""

from __future__ import annotations

import torch
from torch import nn


class ScaleBytes(nn.Module):
    """Turns uint8 pixels into floats in [0, 1] inside the network, so frames travel as bytes.

    Image batches also leave it channels-last: oneDNN's CPU convolutions run
    that layout about 1.5x faster (the weights' layout does not matter).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layout = torch.channels_last if x.dim() == 4 else torch.preserve_format
        if x.dtype == torch.uint8:
            return x.to(torch.float32, memory_format=layout).mul_(1.0 / 255.0)  # a fresh tensor: safe in place
        return x.to(torch.float32, memory_format=layout)


class BoardPlanes(nn.Module):
    """Splits a gray-level board (N, 1, H, W) of uint8 cells into planes a conv net reads without decoding
    levels: one 0/1 plane per `marks` level (walls, apple, head), a 0/1 body plane for levels in
    `body` (low, high), and the body's order, from near 0 at its tail to 1 next to the head."""

    def __init__(self, marks: tuple[int, ...], body: tuple[int, int]):
        super().__init__()
        self.marks, (self.low, self.high) = marks, body
        self.planes = len(marks) + 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != 1:
            raise ValueError(f"board planes need one gray-level channel (N, 1, H, W), got {tuple(x.shape)}")
        board = x[:, 0].to(torch.int16)
        body = (board >= self.low) & (board <= self.high)
        order = torch.where(body, (board - self.low + 1).float() / (self.high - self.low + 1), 0.0)
        planes = [(board == mark).float() for mark in self.marks] + [body.float(), order]
        return torch.stack(planes, dim=-1).permute(0, 3, 1, 2)  # channels-last in memory: oneDNN's fast layout


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over each board position's channels of a conv layer's output (N, C, H, W): PQN's
    normalisation of conv features, as its JAX reference normalises the last axis of NHWC activations."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class DuelingHead(nn.Module):
    """Q(s, a) = V(s) + A(s, a) - mean_a A(s, a) (Wang et al. 2016): a state's value is learned from every
    action taken in it, which helps where most actions matter little (Snake's open board). Subtracting
    the mean makes V and A identifiable without changing the greedy action."""

    def __init__(self, features: int, num_actions: int):
        super().__init__()
        self.value = nn.Linear(features, 1)
        self.advantage = nn.Linear(features, num_actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(x)
        return self.value(x) + advantage - advantage.mean(dim=1, keepdim=True)
