"""The DQN agent's builder: from a TrainConfig, the parts every training mode wires together."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from ddq.config import TrainConfig
from ddq.core.actor import Actor
from ddq.core.dqn import LinearSchedule, UpdateSchedule
from ddq.core.learner import Learner
from ddq.core.prioritized import PrioritySettings, annealed_beta
from ddq.core.replay import ReplayMemory, frame_layout, state_shape
from ddq.core.symmetry import SymmetryAugmentation, board_symmetries
from ddq.gamesim.envs import board_action_moves, make_vector_env
from ddq.models import FlatParameters, build_q_network


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
        return (*frame_layout(space), int(actions.n))
    finally:
        probe.close()


def q_network(config: TrainConfig, frame_shape: tuple[int, ...], num_actions: int) -> torch.nn.Module:
    """The run's Q-network (model, hidden widths, dueling heads) for frames of `frame_shape`."""
    return build_q_network(config.model, state_shape(frame_shape, config.frame_stack), num_actions,
                           config.hidden, config.dueling)


def make_learner(config: TrainConfig, frame_shape: tuple[int, ...], num_actions: int,
                 device: torch.device, seed: int | None = None) -> Learner:
    """The run's learner; with board symmetries, it augments minibatches with a stream of its own drawn
    from `seed` (the agent's: each worker differs), so the replay's and the actor's draws stay as they were."""
    network = q_network(config, frame_shape, num_actions)
    learner = Learner(network, config.optim, config.gamma, config.target_update,
                      config.max_grad_norm, device, config.double_dqn, config.precision)
    if config.board_symmetries:
        moves = board_action_moves(config.env)
        if moves is None:
            raise ValueError(f"board_symmetries: {config.env} declares no board symmetries (Snake does)")
        stream = np.random.default_rng([config.seed if seed is None else seed, 8])
        learner.augmentation = SymmetryAugmentation(board_symmetries(moves), stream)
    return learner


def priority_settings(config: TrainConfig) -> PrioritySettings | None:
    """Prioritized replay's settings when the run asks for it (beta reaches 1 at the end of the run)."""
    if not config.prioritized:
        return None
    return PrioritySettings(config.priority_alpha, config.priority_beta, config.total_steps)


def importance_beta(config: TrainConfig, env_steps: int) -> float:
    """The importance weights' exponent after `env_steps` of the run (unused by uniform replay)."""
    return annealed_beta(env_steps, config.priority_beta, config.total_steps)


def make_replay(config: TrainConfig, frame_shape: tuple[int, ...], dtype: np.dtype, seed: int,
                capacity: int | None = None) -> ReplayMemory:
    return ReplayMemory(capacity or config.buffer_size, config.num_envs, frame_shape, dtype, config.frame_stack,
                        seed, priority_settings(config), config.n_step, config.gamma)


def epsilon_schedule(config: TrainConfig) -> LinearSchedule:
    return LinearSchedule(config.epsilon_start, config.epsilon_end, config.epsilon_steps)


def update_schedule(config: TrainConfig) -> UpdateSchedule:
    return UpdateSchedule(config.replay_ratio, config.train_frequency, config.learning_starts)


def model_parameters(config: TrainConfig) -> FlatParameters:
    """The run's Q-network as flat parameters, initialised exactly as every process of the run does."""
    seed_everything(config.seed, config.threads)
    frame_shape, _, num_actions = env_shapes(config)
    return FlatParameters(q_network(config, frame_shape, num_actions))


@dataclass
class DQNAgent:
    """The parts one DQN agent trains with, made together (Acme's builder): its learner (online and target
    networks, optimizer), replay memory and actor over its own vector envs, the exploration and
    update schedules. A mode adds only where the weights live (`ddq.core.weights`) and how it reports."""

    device: torch.device
    learner: Learner
    replay: ReplayMemory
    actor: Actor
    rng: np.random.Generator  # the actor's: exploration; checkpoints save its state
    epsilon: LinearSchedule
    schedule: UpdateSchedule


def build_agent(config: TrainConfig, seed: int) -> DQNAgent:
    """Seeds everything with `seed`, then builds the agent's parts in a fixed order (so equal seeds give
    equal agents in every mode)."""
    seed_everything(seed, config.threads)
    device = resolve_device(config.device)
    frame_shape, dtype, num_actions = env_shapes(config)
    learner = make_learner(config, frame_shape, num_actions, device, seed)
    replay = make_replay(config, frame_shape, dtype, seed)
    rng = np.random.default_rng(seed)
    actor = Actor(make_vector_env(config.env, config.num_envs, config.env_options), replay, config.frame_stack,
                  rng, device)
    return DQNAgent(device, learner, replay, actor, rng, epsilon_schedule(config), update_schedule(config))
