"""Builds, from a TrainConfig, the parts every training mode wires together."""

from __future__ import annotations

import random

import numpy as np
import torch

from ddq.config import TrainConfig
from ddq.dqn import LinearSchedule, UpdateSchedule
from ddq.gamesim.envs import make_vector_env
from ddq.learner import Learner
from ddq.models import build_q_network
from ddq.replay import ReplayMemory, state_shape


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"--device {name} asked for a GPU, but torch sees none")
    return device


def seed_everything(seed: int, threads: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # denormal optimizer state slows CPU arithmetic for no benefit


def env_shapes(config: TrainConfig) -> tuple[tuple[int, ...], np.dtype, int]:
    """(frame shape, frame dtype, number of actions) of the configured env."""
    probe = make_vector_env(config.env, 1, config.env_options)
    try:
        space, actions = probe.single_observation_space, probe.single_action_space
        if not hasattr(actions, "n"):
            raise ValueError(f"DQN needs a discrete action space; {config.env} has {actions}")
        return tuple(space.shape), space.dtype, int(actions.n)
    finally:
        probe.close()


def make_learner(config: TrainConfig, frame_shape: tuple[int, ...], num_actions: int,
                 device: torch.device) -> Learner:
    network = build_q_network(config.model, state_shape(frame_shape, config.frame_stack),
                              num_actions, config.hidden)
    return Learner(network, config.optim, config.gamma, config.target_update,
                   config.max_grad_norm, device, config.double_dqn, config.precision)


def make_replay(config: TrainConfig, frame_shape: tuple[int, ...], dtype: np.dtype, seed: int) -> ReplayMemory:
    return ReplayMemory(config.buffer_size, config.num_envs, frame_shape, dtype, config.frame_stack, seed)


def epsilon_schedule(config: TrainConfig) -> LinearSchedule:
    return LinearSchedule(config.epsilon_start, config.epsilon_end, config.epsilon_steps)


def update_schedule(config: TrainConfig) -> UpdateSchedule:
    return UpdateSchedule(config.replay_ratio, config.train_frequency, config.learning_starts)
