"""Greedy evaluation: the mean return of a Q-network over fresh episodes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddq.dqn import epsilon_greedy
from ddq.gamesim.envs import EnvOptions, make_vector_env
from ddq.replay import FrameStacker


@dataclass
class Evaluation:
    """Per-episode returns and counts of positively rewarded steps (apples, in Snake)."""

    returns: list[float]
    rewarded_steps: list[int]

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def mean_rewarded_steps(self) -> float:
        return float(np.mean(self.rewarded_steps))


def evaluate(q_net: nn.Module, env_id: str, episodes: int, frame_stack: int = 1,
             env_options: EnvOptions | None = None, seed: int | None = None, epsilon: float = 0.0,
             device: torch.device | str = "cpu") -> Evaluation:
    """`episodes` episodes played side by side with (near-)greedy actions."""
    envs = make_vector_env(env_id, episodes, env_options)
    was_training = q_net.training
    q_net.train(False)  # inference mode for layers such as dropout
    try:
        frames, _ = envs.reset(seed=seed)
        space = envs.single_observation_space
        stacker = FrameStacker(episodes, space.shape, space.dtype, frame_stack)
        states = stacker.reset(frames)
        returns = np.zeros(episodes)
        rewarded = np.zeros(episodes, dtype=np.int64)
        done = np.zeros(episodes, dtype=bool)
        rng = np.random.default_rng(seed)
        no_restart = np.zeros(episodes, dtype=bool)
        while not done.all():
            actions = epsilon_greedy(q_net, torch.from_numpy(states).to(device), epsilon, rng)
            frames, rewards, terminated, truncated, _ = envs.step(actions)
            returns += np.where(done, 0.0, rewards)
            rewarded += ~done & (rewards > 0)
            done |= terminated | truncated
            states = stacker.push(frames, no_restart)
        return Evaluation(returns.tolist(), rewarded.tolist())
    finally:
        q_net.train(was_training)
        envs.close()
