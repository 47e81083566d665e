"""DQN's training step (Mnih et al. 2015), in every mode, the actor-learner learner's included: minibatches drawn
from replay memories, their (Double-)DQN Huber loss against a target network (`ddq.core.dqn`'s rules), and
each gradient pushed to a parameter source. `ddq.core.algorithms.dqn` trains with it, and so does any
algorithm that trains from replay with a loss of its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ddq.core.dqn import double_dqn_targets, dqn_targets, td_errors, td_loss
from ddq.core.learner import GradientStats, Learner
from ddq.core.replay import Batch, ReplayMemory, sample_batch, update_priorities
from ddq.core.weights import ParameterSource


def replay_gradient(learner: Learner, batch: Batch) -> GradientStats:
    """(Double-)DQN Huber loss on a replayed `batch` (each term scaled by its importance weight under
    prioritized replay, which then gets the batch's TD errors); its (clipped) gradient lands in
    `learner.flat.grad`."""
    to = learner.to_tensor
    states, next_states = to(batch.states), to(batch.next_states)
    actions, rewards, terminated = to(batch.actions), to(batch.rewards), to(batch.terminated)
    gamma = learner.gamma if batch.discounts is None else to(batch.discounts)  # n-step: gamma^m
    with torch.no_grad(), learner.autocast():
        next_target_q = learner.target(next_states).float()
        if learner.double_dqn:
            targets = double_dqn_targets(rewards, terminated, learner.online(next_states).float(), next_target_q, gamma)
        else:
            targets = dqn_targets(rewards, terminated, next_target_q, gamma)
    with learner.autocast():
        q_values = learner.online(states).float()
    weights = None if batch.weights is None else to(batch.weights)
    stats = learner.gradient_of(td_loss(q_values, actions, targets, weights), q_values)
    if weights is not None:
        stats.td_errors = td_errors(q_values.detach(), actions, targets).cpu().numpy()
    return stats


BatchGradient = Callable[[Learner, Batch], GradientStats]  # a replayed minibatch's loss, into learner.flat.grad


def train_from_replay(learner: Learner, replay: ReplayMemory | Sequence[ReplayMemory], source: ParameterSource,
                      updates: int, batch_size: int, beta: float = 1.0,
                      gradient: BatchGradient = replay_gradient) -> list[GradientStats]:
    """`updates` rounds of: sample a minibatch (shown through `learner.augmentation`, if the run has one),
    compute its `gradient` against the current weights, push it to `source`, sync (and, with prioritized
    replay, give the batch the priorities of its new TD errors; `beta` is the importance weights' exponent
    now). DQN's one training step in every mode (the actor-learner learner's too), and that of any
    algorithm that trains from replay with a loss of its own; returns each gradient's statistics."""
    memories = [replay] if isinstance(replay, ReplayMemory) else replay
    stats = []
    for _ in range(updates):
        batch = sample_batch(memories, batch_size, beta)
        if learner.augmentation is not None:
            batch = learner.augmentation(batch)
        computed = gradient(learner, batch)
        source.push(learner.flat.grad, samples=batch_size, loss=computed.loss)
        source.sync()
        if batch.positions is not None and computed.td_errors is not None:
            update_priorities(memories, batch.positions, computed.td_errors)
        stats.append(computed)
    return stats
