"""Layers of ddq's own: the inputs every network starts with, built-in or imported from Caffe, and the heads and
views its own networks use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional


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


def board_offset(forward: tuple[int, int], d_row: Any, d_col: Any) -> tuple[Any, Any]:
    """The board offset (row, col) of what a snake heading `forward` sees `d_row` rows down and `d_col`
    columns right of its head, up being ahead and right being forward turned clockwise: the one rule of
    the heading view, for numbers or tensors of them."""
    right = (forward[1], -forward[0])
    return -d_row * forward[0] + d_col * right[0], -d_row * forward[1] + d_col * right[1]


class HeadingView(nn.Module):
    """Turns each board (N, 1, H, W) of uint8 cells so that the snake heads up, and with `centred` also
    centres it on the head: the egocentric view of the published Snake agents, where "a wall ahead" or
    "the body to the left" is one pattern wherever the head is and whichever way it goes.

    The heading is read off the board (from the `neck` level's cell to the `head` level's); `moves` are the
    (row, col) moves of the env's actions, of which the heading is one. Cells the view shows beyond the
    board are `beyond` (a wall). A centred view is 2 (H - 2) - 1 cells a side, so that it shows every
    cell inside the walls wherever the head is. Returns the view and each board's heading (the index of
    its move in `moves`), which `HeadingActions` needs to map the view's action values back.
    """

    heading_by_code: torch.Tensor  # buffers, typed for mypy
    sources: torch.Tensor

    def __init__(self, side: int, head: int, neck: int, beyond: int, moves: Sequence[tuple[int, int]],
                 centred: bool) -> None:
        super().__init__()
        self.head, self.neck, self.beyond, self.side = head, neck, beyond, side
        reach = side - 3 if centred else 0  # the farthest a cell inside the walls is from the head
        self.pad, self.size = reach, 2 * reach + 1 if centred else side
        codes = torch.zeros(9, dtype=torch.long)  # heading by (d_row + 1) * 3 + (d_col + 1)
        for index, (d_row, d_col) in enumerate(moves):
            codes[(d_row + 1) * 3 + d_col + 1] = index
        self.register_buffer("heading_by_code", codes, persistent=False)
        self.register_buffer("sources", torch.stack([self._sources(forward, centred) for forward in moves]),
                             persistent=False)

    def _sources(self, forward: tuple[int, int], centred: bool) -> torch.Tensor:
        """(size * size, 2): the board offset each view cell shows, for a snake heading `forward`."""
        middle = (self.size - 1) / 2
        rows, cols = torch.meshgrid(torch.arange(self.size) - middle, torch.arange(self.size) - middle,
                                    indexing="ij")
        offsets = torch.stack(board_offset(forward, rows, cols), -1)
        if not centred:  # turned about the board's middle rather than the head
            offsets = offsets + (self.side - 1) / 2
        return offsets.reshape(-1, 2).round().long()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dim() != 4 or x.shape[1] != 1 or x.shape[2:] != (self.side, self.side):
            raise ValueError(f"a heading view needs one {self.side}x{self.side} board per state (N, 1, H, W), "
                             f"got {tuple(x.shape)}")
        board = x[:, 0]
        flat = board.flatten(1)
        head = (flat == self.head).to(torch.uint8).argmax(1)
        neck = (flat == self.neck).to(torch.uint8).argmax(1)
        code = (head // self.side - neck // self.side + 1) * 3 + (head % self.side - neck % self.side + 1)
        # A board without a head and neck side by side (no Snake frame has one) reads as heading north rather
        # than indexing out of range: such a state's values mean nothing anyway.
        heading = self.heading_by_code[code.clamp(0, 8)]
        offsets = self.sources[heading]  # (N, size * size, 2)
        if self.pad:  # centred: offsets from the head, on the board padded with what lies beyond it
            offsets = offsets + torch.stack([head // self.side, head % self.side], -1)[:, None, :] + self.pad
            board = functional.pad(board, (self.pad,) * 4, value=self.beyond)
        cells = offsets[..., 0] * board.shape[-1] + offsets[..., 1]
        view = board.flatten(1).gather(1, cells)
        return view.view(-1, 1, self.size, self.size), heading


class HeadingActions(nn.Sequential):
    """A Q-network over `HeadingView`'s view (its first layer): the network values the view's actions
    (up is ahead), and these are mapped back to the env's actions by each board's heading. Being an
    nn.Sequential, its last layer can be swapped for a dueling head like any built-in network's."""

    view_action: torch.Tensor  # a buffer, typed for mypy

    def __init__(self, view: HeadingView, *layers: nn.Module, moves: Sequence[tuple[int, int]]) -> None:
        super().__init__(view, *layers)
        # view_action[h, a]: the view's action that moves the snake as the env's action a does, heading h
        table = [[0] * len(moves) for _ in moves]
        for h, forward in enumerate(moves):
            for e, (d_row, d_col) in enumerate(moves):
                table[h][list(moves).index(board_offset(forward, d_row, d_col))] = e
        self.register_buffer("view_action", torch.tensor(table), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = iter(self)
        values, heading = next(layers)(x)
        for layer in layers:
            values = layer(values)
        return values.gather(1, self.view_action[heading])
