"""DQN (Mnih et al. 2015) as ddq trains it: an actor's transitions go into a replay memory, and minibatches
drawn from it train the online network towards (Double-)DQN targets of a target network, with a Huber
loss. Its rules (targets, loss, schedules) are `ddq.core.dqn`'s and its training step
`ddq.core.replay_training`'s; this module is the algorithm's plug-in: what the rest of ddq asks of it.
Like the interface, it loads no torch until it trains (`ddq.core.algorithms`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ddq.core.algorithms.base import AgentParts, Algorithm

if TYPE_CHECKING:
    from ddq.config import AgentConfig
    from ddq.core.actor import TransitionSink
    from ddq.core.learner import GradientStats, Learner
    from ddq.core.replay import Batch, ReplayMemory
    from ddq.core.weights import ParameterSource


class DQN(Algorithm):
    """Transitions into the replay memory (which checkpoints keep), updates at the replay ratio; every mode.
    An algorithm that differs only in its network and loss (C51, QR-DQN) subclasses it and overrides
    `network` and `gradient`."""

    name = "dqn"
    summary = "a replay memory and a target network"
    keeps_replay = True
    # Its replay memory, target network, frame stacks and update schedule: naming one asks for DQN.
    reads_alone: ClassVar[frozenset[str]] = frozenset({
        "frame_stack", "buffer_size", "batch_size", "n_step", "learning_starts", "train_frequency", "replay_ratio",
        "target_update", "double_dqn", "prioritized", "priority_alpha", "priority_beta"})

    def collector(self, agent: AgentConfig, replay: ReplayMemory, observation_space: Any) -> TransitionSink:
        return replay

    def gradient(self, learner: Learner, batch: Batch) -> GradientStats:
        """Its loss on a replayed minibatch, its gradient into `learner.flat.grad`."""
        from ddq.core.replay_training import replay_gradient  # torch: loaded to train, not to read settings

        return replay_gradient(learner, batch)

    def train(self, parts: AgentParts, source: ParameterSource, new_steps: int,
              beta: float = 1.0) -> list[GradientStats]:
        from ddq.core.replay_training import train_from_replay

        updates = parts.schedule.due(new_steps, parts.actor.env_steps)
        return train_from_replay(parts.learner, parts.replay, source, updates, parts.settings.batch_size, beta,
                                 self.gradient)
