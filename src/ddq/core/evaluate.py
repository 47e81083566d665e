"""Greedy evaluation: the mean return of a Q-network over fresh episodes."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from gymnasium.vector import VectorEnv
from torch import nn

from ddq.core.dqn import epsilon_greedy
from ddq.core.replay import FrameStacker
from ddq.gamesim.envs import EnvOptions, make_vector_env


@dataclass
class Evaluation:
    """Per-episode returns and counts of positively rewarded steps (apples, in Snake), and how many episodes
    ended each way, by the names an env that says so gives in its info's "ending" (Snake: "hit its body",
    ...; empty for envs that do not)."""

    returns: list[float]
    rewarded_steps: list[int]
    endings: dict[str, int] = field(default_factory=dict)
    seed: int | None = None  # the first episode's (None: unseeded), which plays these episodes again

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def mean_rewarded_steps(self) -> float:
        return float(np.mean(self.rewarded_steps))


def _play(q_net: nn.Module, envs: VectorEnv, frame_stack: int, epsilon: float, seed: int | None,
          device: torch.device | str) -> Generator[tuple[Any, ...], None, None]:
    """Steps `envs` with (near-)greedy actions for as long as the caller reads: yields the first
    (observations, info), then (observations, rewards, terminated, truncated, info) of each vector step."""
    was_training = q_net.training
    q_net.train(False)  # inference mode for layers such as dropout
    try:
        frames, info = envs.reset(seed=seed)
        yield frames, info
        stacker = FrameStacker.for_space(envs.num_envs, envs.single_observation_space, frame_stack)
        states = stacker.reset(frames)
        rng = np.random.default_rng(seed)
        no_restart = np.zeros(envs.num_envs, dtype=bool)
        while True:
            actions = epsilon_greedy(q_net, torch.from_numpy(states).to(device), epsilon, rng)
            frames, rewards, terminated, truncated, info = envs.step(actions)
            yield frames, rewards, terminated, truncated, info
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
    endings: Counter[str] = Counter()
    try:
        with contextlib.closing(_play(q_net, envs, frame_stack, epsilon, seed, device)) as steps:
            next(steps)
            for _, rewards, terminated, truncated, info in steps:
                returns += np.where(done, 0.0, rewards)
                rewarded += ~done & (rewards > 0)
                ends = ~done & (terminated | truncated)
                if "ending" in info:
                    endings.update(str(name) for name in np.asarray(info["ending"])[ends])
                done |= ends
                if done.all() or (should_stop is not None and should_stop()):
                    break
        return Evaluation(returns.tolist(), rewarded.tolist(), dict(sorted(endings.items())), seed)
    finally:
        envs.close()


@dataclass
class ReplayedEpisode:
    """One greedy episode as a replay shows it, frame by frame: the observations (for Snake the board
    images), the rewarded steps so far (Snake's apples eaten), and the length the env's info gives (the
    snake's; None for envs that give none)."""

    frames: list[np.ndarray]
    rewarded_steps: list[int]
    lengths: list[int] | None


def greedy_episode_frames(q_net: nn.Module, env_id: str, frame_stack: int = 1,
                          env_options: EnvOptions | None = None, seed: int | None = None,
                          max_frames: int = 2000, device: torch.device | str = "cpu") -> ReplayedEpisode:
    """One greedy episode, the first frame and the last included (at most `max_frames`): what a replay of
    the agent shows."""
    envs = make_vector_env(env_id, 1, env_options)
    try:
        with contextlib.closing(_play(q_net, envs, frame_stack, 0.0, seed, device)) as steps:
            observations, info = next(steps)
            frames, rewarded, lengths = [_board(observations[0])], [0], [_length(info)]
            for observations, rewards, terminated, truncated, info in steps:
                frames.append(_board(observations[0]))
                rewarded.append(rewarded[-1] + int(rewards[0] > 0))
                lengths.append(_length(info))
                if terminated[0] or truncated[0] or len(frames) >= max_frames:
                    break
        return ReplayedEpisode(frames, rewarded, None if None in lengths else cast(list[int], lengths))
    finally:
        envs.close()


def _length(info: dict[str, Any]) -> int | None:
    return int(np.asarray(info["length"])[0]) if "length" in info else None


def _board(observation: np.ndarray) -> np.ndarray:
    """An image observation without a one-channel axis: (height, width, 1) becomes (height, width)."""
    return observation[..., 0] if observation.ndim == 3 and observation.shape[-1] == 1 else observation
