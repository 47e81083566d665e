"""Greedy evaluation: the mean return of a Q-network over fresh episodes."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ddq.dqn import epsilon_greedy
from ddq.gamesim.envs import EnvOptions, make_vector_env
from ddq.replay import FrameStacker


def evaluate(q_net: nn.Module, env_id: str, episodes: int, frame_stack: int = 1,
             env_options: EnvOptions | None = None, seed: int | None = None, epsilon: float = 0.0,
             device: torch.device | str = "cpu") -> list[float]:
    """Returns of `episodes` episodes played side by side with (near-)greedy actions."""
    envs = make_vector_env(env_id, episodes, env_options)
    try:
        frames, _ = envs.reset(seed=seed)
        space = envs.single_observation_space
        stacker = FrameStacker(episodes, space.shape, space.dtype, frame_stack)
        states = stacker.reset(frames)
        returns = np.zeros(episodes)
        done = np.zeros(episodes, dtype=bool)
        rng = np.random.default_rng(seed)
        no_restart = np.zeros(episodes, dtype=bool)
        was_training = q_net.training
        q_net.eval()
        while not done.all():
            actions = epsilon_greedy(q_net, torch.from_numpy(states).to(device), epsilon, rng)
            frames, rewards, terminated, truncated, _ = envs.step(actions)
            returns += np.where(done, 0.0, rewards)
            done |= terminated | truncated
            states = stacker.push(frames, no_restart)
        q_net.train(was_training)
        return returns.tolist()
    finally:
        envs.close()
