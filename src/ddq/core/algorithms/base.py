"""What an algorithm is to the rest of ddq: one small interface (Dopamine's agent, Acme's builder).

Everything that differs between ways of learning Q-values is a method or a fact of one `Algorithm`: the
network it needs, what its actor collects (transitions into the replay memory, or fresh rollouts), its
loss and training step, the settings it reads alone and checks, the modes it trains in, what a checkpoint
keeps, and its settings over an env's preset. The rest of ddq holds the algorithm the settings name
(`ddq.core.algorithms.algorithm_for`) and asks it; no module outside this package compares its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ddq.config import MODES
from ddq.config.sources import SettingRefused

if TYPE_CHECKING:  # torch's: an algorithm loads them to train, not to read settings (`ddq.core.algorithms`)
    import numpy as np
    import torch

    from ddq.config import AgentConfig, TrainConfig
    from ddq.core.actor import Actor, TransitionSink
    from ddq.core.dqn import UpdateSchedule
    from ddq.core.learner import GradientStats, Learner
    from ddq.core.replay import ReplayMemory
    from ddq.core.weights import ParameterSource


class AgentParts(Protocol):
    """The parts of one agent an algorithm trains with (`ddq.core.agent.TrainingAgent` has them all)."""

    learner: Learner
    replay: ReplayMemory
    sink: TransitionSink  # what the actor collects into: the replay memory, or the algorithm's own buffer
    actor: Actor
    rng: np.random.Generator
    schedule: UpdateSchedule
    settings: AgentConfig


class Algorithm(ABC):
    """One way of learning Q-values. A new one subclasses this (or DQN, as C51 would), and is named once, in
    `ddq.core.algorithms.ALGORITHMS`."""

    name: ClassVar[str]  # what `--algo` names it
    summary: ClassVar[str] = ""  # what it is, in a few words, for `--algo`'s help
    layer_norm: ClassVar[bool] = False  # LayerNorm after each hidden layer of its network
    keeps_replay: ClassVar[bool] = True  # what a checkpoint keeps beside the learner: the replay memory
    modes: ClassVar[tuple[str, ...]] = MODES  # the training modes it trains in
    # Settings it reads that another algorithm does not (one built on another inherits its parent's): naming one,
    # and no algorithm, asks for an algorithm that reads it over an env's measured choice.
    reads_alone: ClassVar[frozenset[str]] = frozenset()
    # The envs (preset keys: an env id, "atari" or "minatar") it trains when no algorithm is named: measured.
    chosen_for: ClassVar[frozenset[str]] = frozenset()
    # Its settings over an env's preset, by preset key.
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    refusal: ClassVar[str] = ""  # why it trains in no mode but `modes` (for `check`'s message)

    def check(self, config: TrainConfig) -> None:
        """Raises SettingRefused (a ValueError naming the setting), in one line, for settings this algorithm
        cannot train with."""
        if config.run.mode not in self.modes:
            named = ", ".join(self.modes[:-1]) + " and " + self.modes[-1] if len(self.modes) > 1 else self.modes[0]
            raise SettingRefused("mode", f"algo {self.name} trains in {named} mode: {self.refusal}")

    def network(self, agent: AgentConfig, states: tuple[int, ...], num_actions: int) -> torch.nn.Module:
        """The Q-network it learns, for states of shape `states` (the settings' model, widths and heads;
        an algorithm whose network returns more than Q-values, such as C51's atoms, builds its own)."""
        from ddq.models import build_q_network  # torch: loaded to train, not to read settings

        return build_q_network(agent.model, states, num_actions, agent.hidden, agent.dueling,
                               layer_norm=self.layer_norm)

    @abstractmethod
    def collector(self, agent: AgentConfig, replay: ReplayMemory, observation_space: Any) -> TransitionSink:
        """What the actor collects into: the agent's `replay` memory, or a buffer of the algorithm's own."""

    @abstractmethod
    def train(self, parts: AgentParts, source: ParameterSource, new_steps: int,
              beta: float = 1.0) -> list[GradientStats]:
        """The training due after the actor's `new_steps`, each gradient pushed to `source` (prioritized
        replay's importance exponent now `beta`); each gradient's statistics."""
