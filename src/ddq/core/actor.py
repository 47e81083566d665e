"""The actor: steps a vector env epsilon-greedily, feeds the replay memory, tracks episodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from gymnasium.vector import VectorEnv
from torch import nn

from ddq.core.dqn import epsilon_greedy_actions
from ddq.core.replay import FrameStacker


@dataclass
class Episode:
    """A finished training episode."""

    episode_return: float
    length: int
    truncated: bool


class TransitionSink(Protocol):
    """Where an actor's vector steps go: its own replay memory, or a buffer of experience to send."""

    def start(self, frames: np.ndarray) -> None: ...

    def add(self, frames: np.ndarray, actions: np.ndarray | None, rewards: np.ndarray | None,
            terminated: np.ndarray | None, continues: np.ndarray) -> None: ...


class Actor:
    """Plays `envs` (next-step autoreset) and records every real transition in `replay`."""

    def __init__(self, envs: VectorEnv, replay: TransitionSink, frame_stack: int,
                 rng: np.random.Generator, device: torch.device):
        space = envs.single_observation_space
        self.envs, self.replay, self.rng, self.device = envs, replay, rng, device
        self.stacker = FrameStacker.for_space(envs.num_envs, space, frame_stack)
        self.resetting = np.zeros(envs.num_envs, dtype=bool)
        self.returns = np.zeros(envs.num_envs, dtype=np.float64)
        self.lengths = np.zeros(envs.num_envs, dtype=np.int64)
        self.states: np.ndarray | None = None
        self.q_values: np.ndarray | None = None  # Q(s, .) of the states the last step acted in
        self.env_steps = 0

    def reset(self, seed: int | None) -> None:
        frames, _ = self.envs.reset(seed=seed)
        self.replay.start(frames)
        self.states = self.stacker.reset(frames)
        self.resetting[:] = False
        self.returns[:] = 0
        self.lengths[:] = 0

    def step(self, q_net: nn.Module, epsilon: float) -> list[Episode]:
        """One vector step; returns the episodes it finished."""
        with torch.no_grad():
            self.q_values = q_net(torch.from_numpy(self.states).to(self.device)).cpu().numpy()
        actions = epsilon_greedy_actions(self.q_values, epsilon, self.rng)
        frames, rewards, terminated, truncated, _ = self.envs.step(actions)
        # A stream that ended last step was reset by this one: no transition.
        continues = ~self.resetting
        self.replay.add(frames, actions, rewards, terminated, continues)
        self.states = self.stacker.push(frames, starts=self.resetting)
        self.env_steps += int(continues.sum())
        self.returns += np.where(continues, rewards, 0.0)
        self.lengths += continues
        self.resetting = continues & (terminated | truncated)
        finished = [Episode(float(self.returns[i]), int(self.lengths[i]), bool(truncated[i]))
                    for i in np.flatnonzero(self.resetting)]
        self.returns[self.resetting] = 0
        self.lengths[self.resetting] = 0
        return finished
