"""PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning") as ddq trains it: Q-learning on
short fresh rollouts of vectorised envs, with Q(lambda) targets, LayerNorm, and no replay memory or target
network. Its rules (the rollout, the returns, the training step) are `ddq.core.pqn`'s; this module is the
algorithm's plug-in: what the rest of ddq asks of it. Like the interface, it loads no torch until it trains
(`ddq.core.algorithms`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ddq.config.sources import SettingRefused
from ddq.core.algorithms.base import AgentParts, Algorithm

if TYPE_CHECKING:
    from ddq.config import AgentConfig, TrainConfig
    from ddq.core.actor import TransitionSink
    from ddq.core.learner import GradientStats
    from ddq.core.replay import ReplayMemory
    from ddq.core.weights import ParameterSource


class PQN(Algorithm):
    """Fresh rollouts, no replay memory (checkpoints keep none), no target network; LayerNorm in the network;
    serial, downpour and data-parallel mode."""

    name = "pqn"
    summary = "Q(lambda) on fresh rollouts with LayerNorm, no replay, no target: Gallici et al. 2024"
    layer_norm = True
    keeps_replay = False
    modes = ("serial", "downpour", "data-parallel")
    refusal = "actor-learner's learner draws from a replay memory of the actors' transitions, and PQN keeps none"
    # Measured (docs/benchmarks.md): CartPole with a 64x64 MLP and Adam at 3e-3 reached 475 in a median 2.5 s
    # over 10 serial seeds, against 4.8 s with the preset's 256x256 MLP and 1.5e-3, and 18 s with DQN.
    # LunarLander with PQN's own defaults (8 envs, a 256x256 MLP, Adam at 1e-3) reached a greedy 200 in a
    # median 39.7 s over 10 serial seeds, where DQN's defaults took 64 s over 6. PQN needs more env steps:
    # 150k-350k in serial mode, 234k-702k in downpour (10 seeds each), so its budget there is 1M (DQN's: 200k).
    chosen_for: ClassVar[frozenset[str]] = frozenset({"CartPole-v1", "LunarLander-v3"})
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "CartPole-v1": dict(hidden=[64, 64], optim=dict(lr=3e-3)),
        "LunarLander-v3": dict(total_steps=1_000_000),
        # MinAtar: the PQN paper's MinAtar settings (128 envs, rollouts of 32 steps, 2 passes of 32
        # minibatches, lambda 0.65, Adam 5e-4, gradients clipped at 10), with epsilon falling over the first
        # 250k frames where the paper's falls over 1M of its 10M, and a fixed rate where the paper's falls
        # linearly to 0. No epsilon delay: the DQN preset's random frames warm its replay memory up, and PQN
        # has none (its MinAtar runs were measured without one).
        "minatar": dict(
            num_envs=128, rollout_steps=32, epochs=2, minibatches=32, q_lambda=0.65, epsilon_end=0.05,
            epsilon_steps=250_000, epsilon_delay=0, max_grad_norm=10.0,
            optim=dict(optimizer="adam", lr=5e-4, eps=None, centered=False)),
    }

    def check(self, config: TrainConfig) -> None:
        super().check(config)
        if config.agent.frame_stack != 1:
            raise SettingRefused("frame_stack",
                                 f"algo pqn plays single frames: frame_stack must be 1, got {config.agent.frame_stack}")
        # A rollout's rows are at least half transitions (a row that resets an env is none, and the next is one),
        # so with no more minibatches than that every minibatch holds one. An empty one would be skipped, and
        # data-parallel's ranks, whose episodes end apart, would then make different numbers of all-reduces.
        agent = config.agent
        if agent.minibatches > agent.num_envs * (agent.rollout_steps // 2):
            raise SettingRefused("minibatches", f"minibatches {agent.minibatches} would leave some empty: a rollout "
                                 f"of {agent.rollout_steps} steps of {agent.num_envs} envs holds at least "
                                 f"{agent.num_envs * (agent.rollout_steps // 2)} transitions; give at most that")

    def collector(self, agent: AgentConfig, replay: ReplayMemory, observation_space: Any) -> TransitionSink:
        from ddq.core.pqn import Rollout  # torch: loaded to train, not to read settings

        return Rollout(agent.rollout_steps, agent.num_envs, observation_space)

    def train(self, parts: AgentParts, source: ParameterSource, new_steps: int,
              beta: float = 1.0) -> list[GradientStats]:
        """Its epochs on the rollout once the rollout is full."""
        from ddq.core.pqn import Rollout, train_on_rollout

        rollout, a = parts.sink, parts.settings
        if not isinstance(rollout, Rollout):
            raise TypeError(f"PQN's actor collects into its Rollout (`PQN.collector`), not {type(rollout).__name__}")
        if not rollout.full:
            return []
        stats = train_on_rollout(parts.learner, rollout, source, a.gamma, a.q_lambda, a.epochs, a.minibatches,
                                 parts.rng)
        rollout.clear()
        return stats
