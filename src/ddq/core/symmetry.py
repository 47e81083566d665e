"""Symmetry augmentation: training minibatches shown through the rotations and mirror images of a square board.

On a game whose rules do not change when its square board is turned or
mirrored (Snake: walls all round, apples placed uniformly at random), a
transition (s, a, r, s') seen through any of the board's 8 symmetries g, that
is (g s, g a, r, g s'), is a transition the game could have produced: the
reward and the end of the episode stay, the frames turn, and the action turns
with them (north becomes west under a quarter turn). Showing each replayed
transition through one symmetry drawn at random gives the learner eight
boards' worth of experience for the env steps spent, at the cost of a few
array copies per minibatch: DrQ's data augmentation, exact here rather than
approximate because the game itself is symmetric. PQN's minibatches (states,
actions and Q(lambda) returns) turn the same way: a return, like a reward,
is the same on the turned board.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ddq.core.replay import Batch


@dataclass(frozen=True)
class BoardSymmetry:
    """One symmetry of a square board: `quarter_turns` counter-clockwise (np.rot90 over the last two axes),
    then, if `mirrored`, a left-right flip; `actions[a]` is what action a becomes on the transformed board."""

    quarter_turns: int
    mirrored: bool
    actions: tuple[int, ...]

    def frames(self, frames: np.ndarray) -> np.ndarray:
        """`frames` (..., height, width) as the transformed board shows them."""
        turned = np.rot90(frames, self.quarter_turns, axes=(-2, -1))
        return turned[..., ::-1] if self.mirrored else turned

    def move(self, row: int, col: int) -> tuple[int, int]:
        """A move of (row, col) cells (row down, col right) as seen on the transformed board."""
        for _ in range(self.quarter_turns % 4):
            row, col = -col, row  # np.rot90's counter-clockwise quarter turn
        return (row, -col) if self.mirrored else (row, col)


def board_symmetries(action_moves: Sequence[tuple[int, int]]) -> list[BoardSymmetry]:
    """The 8 symmetries of a square board (the identity first) for a game whose action a moves by
    `action_moves[a]` (row, col); refused if some transformed move is no action's."""
    moves = [tuple(move) for move in action_moves]
    symmetries = []
    for mirrored in (False, True):
        for quarter_turns in range(4):
            bare = BoardSymmetry(quarter_turns, mirrored, ())
            turned = [bare.move(*move) for move in moves]
            if any(move not in moves for move in turned):
                raise ValueError(f"the actions' moves {moves} are not closed under the board's symmetries")
            symmetries.append(BoardSymmetry(quarter_turns, mirrored, tuple(moves.index(m) for m in turned)))
    return symmetries


class SymmetryAugmentation:
    """Shows each transition of a minibatch through one of `symmetries`, drawn uniformly by `rng`."""

    def __init__(self, symmetries: Sequence[BoardSymmetry], rng: np.random.Generator) -> None:
        if not symmetries:
            raise ValueError("symmetry augmentation needs at least one symmetry")
        self.symmetries = list(symmetries)
        self.rng = rng

    def __call__(self, batch: Batch) -> Batch:
        """A replayed minibatch (DQN's): its states, next states and actions, each row through one symmetry."""
        (states, next_states), actions = self._transform((batch.states, batch.next_states), batch.actions)
        return dataclasses.replace(batch, states=states, next_states=next_states, actions=actions)

    def regression(self, states: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A regression minibatch (PQN's: states, actions and fixed returns, which no symmetry changes): its
        states and actions, each row through one symmetry."""
        (states,), actions = self._transform((states,), actions)
        return states, actions

    def _transform(self, frames: tuple[np.ndarray, ...], actions: np.ndarray) -> tuple[tuple[np.ndarray, ...],
                                                                                       np.ndarray]:
        """`frames` (arrays of the rows' frames) and `actions`, row i of each through the same symmetry."""
        if frames[0].ndim < 3 or frames[0].shape[-1] != frames[0].shape[-2]:
            raise ValueError(f"symmetry augmentation needs square board frames, got states of {frames[0].shape}")
        chosen = self.rng.integers(len(self.symmetries), size=len(actions))
        turned = tuple(np.empty_like(array) for array in frames)
        turned_actions = np.empty_like(actions)
        for index, symmetry in enumerate(self.symmetries):
            rows = np.flatnonzero(chosen == index)
            if rows.size == 0:
                continue
            for source, target in zip(frames, turned, strict=True):
                target[rows] = symmetry.frames(source[rows])
            turned_actions[rows] = np.asarray(symmetry.actions, dtype=actions.dtype)[actions[rows]]
        return turned, turned_actions
