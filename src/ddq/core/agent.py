"""The DQN agent's builder: from the agent's settings (`AgentConfig`), the parts every training mode wires together."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from ddq.config import AgentConfig
from ddq.core.actor import Actor, TransitionSink
from ddq.core.algorithms import Algorithm, algorithm_for
from ddq.core.dqn import LinearSchedule, UpdateSchedule
from ddq.core.learner import GradientStats, Learner
from ddq.core.prioritized import PrioritySettings, annealed_beta
from ddq.core.replay import ReplayMemory, state_shape
from ddq.core.symmetry import SymmetryAugmentation, board_symmetries
from ddq.core.weights import ParameterSource
from ddq.gamesim.envs import make_vector_env
from ddq.gamesim.spec import EnvSpec, read_env_spec
from ddq.models import FlatParameters


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:  # torch's own line lists twenty device types, most of which ddq cannot train on
        raise RuntimeError(f"device {name!r} is not one torch names") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} asks for a GPU, and torch sees none here")
    return device


def seed_everything(seed: int, threads: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # denormal optimizer state slows CPU arithmetic for no benefit


def env_spec(agent: AgentConfig) -> EnvSpec:
    """The configured env's spec (frame layout, actions, board moves, score): read once per process, then
    from the cache (`ddq.gamesim.spec.read_env_spec`)."""
    return read_env_spec(agent.env, agent.env_options)


def q_network(agent: AgentConfig, frame_shape: tuple[int, ...], num_actions: int) -> torch.nn.Module:
    """The run's Q-network for frames of `frame_shape`."""
    return network_for_states(agent, state_shape(frame_shape, agent.frame_stack), num_actions)


def network_for_states(agent: AgentConfig, states: tuple[int, ...], num_actions: int) -> torch.nn.Module:
    """The agent's Q-network (model, hidden widths, dueling heads; what its algorithm needs, such as PQN's
    LayerNorm) for states of shape `states` (frames stacked first)."""
    return algorithm_for(agent.algo).network(agent, states, num_actions)


def make_learner(agent: AgentConfig, frame_shape: tuple[int, ...], num_actions: int,
                 device: torch.device, seed: int | None = None) -> Learner:
    """The run's learner; with board symmetries, it augments minibatches with a stream of its own drawn
    from `seed` (the agent's: each worker differs), so the replay's and the actor's draws match a run without it."""
    network = q_network(agent, frame_shape, num_actions)
    learner = Learner(network, agent.optim, agent.gamma, agent.target_update,
                      agent.max_grad_norm, device, agent.double_dqn, agent.precision)
    if agent.board_symmetries:
        moves = env_spec(agent).board_moves("board_symmetries")
        stream = np.random.default_rng([agent.seed if seed is None else seed, 8])
        learner.augmentation = SymmetryAugmentation(board_symmetries(moves), stream)
    return learner


def priority_settings(agent: AgentConfig, total_steps: int) -> PrioritySettings | None:
    """Prioritized replay's settings when the agent asks for it (beta reaches 1 at `total_steps`, the run's
    end)."""
    if not agent.prioritized:
        return None
    return PrioritySettings(agent.priority_alpha, agent.priority_beta, total_steps)


def importance_beta(agent: AgentConfig, env_steps: int, total_steps: int) -> float:
    """The importance weights' exponent after `env_steps` of `total_steps` (unused by uniform replay)."""
    return annealed_beta(env_steps, agent.priority_beta, total_steps)


def make_replay(agent: AgentConfig, frame_shape: tuple[int, ...], dtype: np.dtype, seed: int, total_steps: int,
                capacity: int | None = None) -> ReplayMemory:
    """`total_steps`: the run's, over which prioritized replay's beta anneals to 1."""
    return ReplayMemory(capacity or agent.buffer_size, agent.num_envs, frame_shape, dtype, agent.frame_stack,
                        seed, priority_settings(agent, total_steps), agent.n_step, agent.gamma)


def epsilon_schedule(agent: AgentConfig) -> LinearSchedule:
    return LinearSchedule(agent.epsilon_start, agent.epsilon_end, agent.epsilon_steps, agent.epsilon_delay)


def update_schedule(agent: AgentConfig, lockstep: bool = False) -> UpdateSchedule:
    """DQN's updates at the replay ratio; `lockstep`: by vector steps, for workers that step together
    (`UpdateSchedule`'s lockstep_envs)."""
    return UpdateSchedule(agent.replay_ratio, agent.train_frequency, agent.learning_starts,
                          agent.num_envs if lockstep else None)


def model_parameters(agent: AgentConfig) -> FlatParameters:
    """The run's Q-network as flat parameters, initialised exactly as every process of the run does."""
    seed_everything(agent.seed, agent.threads)
    spec = env_spec(agent)
    return FlatParameters(q_network(agent, spec.frame_shape, spec.num_actions))


@dataclass
class TrainingAgent:
    """The parts one agent trains with, made together (Acme's builder): its learner (online and target
    networks, optimizer), replay memory and actor over its own vector envs, the exploration and
    update schedules, and the algorithm that trains them (`ddq.core.algorithms`). A mode adds only where
    the weights live (`ddq.core.weights`) and how it reports."""

    device: torch.device
    learner: Learner
    replay: ReplayMemory
    actor: Actor
    rng: np.random.Generator  # the actor's: exploration; checkpoints save its state
    epsilon: LinearSchedule
    schedule: UpdateSchedule
    settings: AgentConfig
    algorithm: Algorithm
    sink: TransitionSink  # what the actor collects into, as its algorithm says: the replay memory, or a rollout

    @property
    def replays(self) -> bool:
        """Whether the algorithm trains from the replay memory (DQN), so that checkpoints should keep it;
        PQN's stays empty."""
        return self.algorithm.keeps_replay

    def train(self, source: ParameterSource, new_steps: int, beta: float = 1.0) -> list[GradientStats]:
        """The training due after the actor's `new_steps`, as its algorithm says, each gradient pushed to
        `source` (prioritized replay's importance exponent now `beta`): DQN's updates at the replay ratio,
        PQN's epochs on the rollout once the rollout is full. Every mode trains through this."""
        return self.algorithm.train(self, source, new_steps, beta)


def build_agent(agent: AgentConfig, seed: int, total_steps: int) -> TrainingAgent:
    """Seeds everything with `seed`, then builds the agent's parts in a fixed order (so equal seeds give
    equal agents in every mode). `total_steps`: the run's (prioritized replay anneals over it)."""
    seed_everything(seed, agent.threads)
    device = resolve_device(agent.device)
    spec = env_spec(agent)
    learner = make_learner(agent, spec.frame_shape, spec.num_actions, device, seed)
    replay = make_replay(agent, spec.frame_shape, spec.frame_dtype, seed, total_steps)
    rng = np.random.default_rng(seed)
    envs = make_vector_env(agent.env, agent.num_envs, agent.env_options)
    algorithm = algorithm_for(agent.algo)
    sink = algorithm.collector(agent, replay, envs.single_observation_space)
    actor = Actor(envs, sink, agent.frame_stack, rng, device)
    return TrainingAgent(device, learner, replay, actor, rng, epsilon_schedule(agent), update_schedule(agent), agent,
                    algorithm, sink)
