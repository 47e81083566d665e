"""Greedy evaluation: the mean return of a Q-network over fresh episodes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium.vector import VectorEnv
from torch import nn

from ddq.core.dqn import epsilon_greedy
from ddq.core.replay import FrameStacker
from ddq.gamesim.envs import EnvOptions, make_vector_env


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


def _play(q_net: nn.Module, envs: VectorEnv, frame_stack: int, epsilon: float, seed: int | None,
          device: torch.device | str) -> Generator[tuple[np.ndarray, ...], None, None]:
    """Steps `envs` with (near-)greedy actions for as long as the caller reads: yields the first
    observations, then (observations, rewards, terminated, truncated) of each vector step."""
    was_training = q_net.training
    q_net.train(False)  # inference mode for layers such as dropout
    try:
        frames, _ = envs.reset(seed=seed)
        yield (frames,)
        stacker = FrameStacker.for_space(envs.num_envs, envs.single_observation_space, frame_stack)
        states = stacker.reset(frames)
        rng = np.random.default_rng(seed)
        no_restart = np.zeros(envs.num_envs, dtype=bool)
        while True:
            actions = epsilon_greedy(q_net, torch.from_numpy(states).to(device), epsilon, rng)
            frames, rewards, terminated, truncated, _ = envs.step(actions)
            yield frames, rewards, terminated, truncated
            states = stacker.push(frames, no_restart)
    finally:
        q_net.train(was_training)


def evaluate(q_net: nn.Module, env_id: str, episodes: int, frame_stack: int = 1,
             env_options: EnvOptions | None = None, seed: int | None = None, epsilon: float = 0.0,
             device: torch.device | str = "cpu", should_stop: Callable[[], bool] | None = None) -> Evaluation:
    """`episodes` episodes played side by side with (near-)greedy actions; `should_stop` (asked every step)
    ends them early, for a caller that no longer wants the result."""
    envs = make_vector_env(env_id, episodes, env_options)
    returns = np.zeros(episodes)
    rewarded = np.zeros(episodes, dtype=np.int64)
    done = np.zeros(episodes, dtype=bool)
    try:
        with contextlib.closing(_play(q_net, envs, frame_stack, epsilon, seed, device)) as steps:
            next(steps)
            for _, rewards, terminated, truncated in steps:
                returns += np.where(done, 0.0, rewards)
                rewarded += ~done & (rewards > 0)
                done |= terminated | truncated
                if done.all() or (should_stop is not None and should_stop()):
                    break
        return Evaluation(returns.tolist(), rewarded.tolist())
    finally:
        envs.close()


def greedy_episode_frames(q_net: nn.Module, env_id: str, frame_stack: int = 1,
                          env_options: EnvOptions | None = None, seed: int | None = None,
                          max_frames: int = 2000, device: torch.device | str = "cpu") -> list[np.ndarray]:
    """The observations of one greedy episode, the first and the last included (at most `max_frames`):
    what a replay of the agent shows. For Snake each is the board image."""
    envs = make_vector_env(env_id, 1, env_options)
    try:
        with contextlib.closing(_play(q_net, envs, frame_stack, 0.0, seed, device)) as steps:
            frames = [_board(next(steps)[0][0])]
            for observations, _, terminated, truncated in steps:
                frames.append(_board(observations[0]))
                if terminated[0] or truncated[0] or len(frames) >= max_frames:
                    break
        return frames
    finally:
        envs.close()


def _board(observation: np.ndarray) -> np.ndarray:
    """An image observation without a one-channel axis: (height, width, 1) becomes (height, width)."""
    return observation[..., 0] if observation.ndim == 3 and observation.shape[-1] == 1 else observation
