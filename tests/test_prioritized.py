"""Prioritized replay against hand-computed numbers: the sum tree, sampling probabilities, importance weights,
beta's annealing, Ape-X's initial priorities and per-actor epsilons."""

import numpy as np
import pytest
import torch
from torch import nn

from ddq.core.dqn import per_actor_epsilon, td_loss
from ddq.core.learner import Learner
from ddq.core.optimizers import OptimizerConfig
from ddq.core.prioritized import (
    PrioritySettings,
    SumTree,
    annealed_beta,
    importance_weights,
    initial_td_errors,
    priority,
)
from ddq.core.replay import ReplayMemory, sample_batch, update_priorities
from ddq.core.replay_training import replay_gradient


def test_sum_tree_sums_and_finds_by_running_sum():
    tree = SumTree(5)
    tree.set(np.arange(5), np.array([1.0, 2.0, 0.0, 3.0, 4.0]))
    assert tree.total == 10.0
    # running sums: [0,1) -> 0, [1,3) -> 1, (2 is empty), [3,6) -> 3, [6,10) -> 4
    assert tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99])).tolist() == [0, 0, 1, 1, 3, 3, 4, 4]
    tree.set(np.array([4]), np.array([0.5]))
    assert tree.total == 6.5 and tree.find(np.array([6.2])).tolist() == [4]


def test_stratified_draws_follow_the_priorities():
    tree, rng = SumTree(4), np.random.default_rng(0)
    tree.set(np.arange(4), np.array([1.0, 0.0, 3.0, 6.0]))
    counts = np.bincount(np.concatenate([tree.stratified(10, rng) for _ in range(2000)]), minlength=4)
    assert counts[1] == 0
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.0, 0.3, 0.6], atol=0.01)


def test_priorities_weights_and_beta_by_hand():
    settings = PrioritySettings(alpha=0.5, eps=0.0)
    np.testing.assert_allclose(priority(np.array([-4.0, 1.0, 0.25]), settings), [2.0, 1.0, 0.5])
    # P = 0.5, 0.25, 0.25 with beta 1: w = 1/P normalised by the largest = [2, 4, 4] / 4
    np.testing.assert_allclose(importance_weights(np.array([0.5, 0.25, 0.25]), 1.0), [0.5, 1.0, 1.0])
    np.testing.assert_allclose(importance_weights(np.array([0.5, 0.125]), 0.5), [0.5, 1.0])
    assert [annealed_beta(s, 0.4, 100) for s in (0, 50, 100, 500)] == pytest.approx([0.4, 0.7, 1.0, 1.0])


def test_ape_x_initial_priorities_and_epsilons_by_hand():
    q_now = np.array([[1.0, 2.0], [0.5, 0.0]])
    q_next = np.array([[3.0, 1.0], [9.0, 9.0]])
    # |1 + 0.9 * 3 - 2| = 1.7; terminated: |-1 - 0.5| = 1.5
    errors = initial_td_errors(q_now, np.array([1, 0]), np.array([1.0, -1.0]), np.array([False, True]), q_next, 0.9)
    np.testing.assert_allclose(errors, [1.7, 1.5], rtol=1e-6)
    assert per_actor_epsilon(0, 1) == 0.4
    assert per_actor_epsilon(0, 8) == pytest.approx(0.4)
    assert per_actor_epsilon(7, 8) == pytest.approx(0.4 ** 8)
    assert per_actor_epsilon(1, 3) == pytest.approx(0.4 ** 4.5)


def _memory(capacity=64, streams=2, stack=1, seed=0, alpha=1.0):
    return ReplayMemory(capacity, streams, (1,), np.dtype(np.float32), stack, seed,
                        PrioritySettings(alpha=alpha, eps=0.0))


def _fill(memory, steps, td=None):
    memory.start(np.zeros((memory.num_streams, 1), np.float32))
    for t in range(1, steps + 1):
        frames = np.full((memory.num_streams, 1), t, np.float32)
        memory.add(frames, np.zeros(memory.num_streams, np.int64), np.full(memory.num_streams, t, np.float32),
                   np.zeros(memory.num_streams, bool), np.ones(memory.num_streams, bool),
                   None if td is None else td(t))


def test_a_prioritized_memory_samples_in_proportion_and_weights_by_hand():
    memory = _memory(streams=1)
    _fill(memory, 3, td=lambda t: np.array([float(t)]))  # transitions with rewards 1, 2, 3 get priorities 1, 2, 3
    counts = {1.0: 0, 2.0: 0, 3.0: 0}
    for _ in range(600):
        batch = memory.sample(6, beta=1.0)
        for reward in batch.rewards:
            counts[float(reward)] += 1
        # P = p / 6; w = (1/P) / max over the batch: the reward-1 transition (P = 1/6) has weight 1
        expected = (1 / (batch.rewards / 6)) / (1 / (batch.rewards.min() / 6))
        np.testing.assert_allclose(batch.weights, expected, rtol=1e-5)
    total = sum(counts.values())
    np.testing.assert_allclose([counts[r] / total for r in (1.0, 2.0, 3.0)], [1 / 6, 2 / 6, 3 / 6], atol=0.02)


def test_new_transitions_get_the_largest_priority_and_updates_change_it():
    memory = _memory(streams=1)
    _fill(memory, 2, td=lambda t: np.array([4.0]) if t == 1 else None)
    assert memory.tree.get(np.array([0, 1])).tolist() == [4.0, 4.0]  # unknown: the largest so far
    update_priorities([memory], np.array([[0, 1]]), np.array([0.5]))
    assert memory.tree.get(np.array([1])).tolist() == [0.5]


def test_overwritten_and_unfinished_transitions_are_never_sampled():
    memory = _memory(capacity=8, streams=2, stack=2)
    _fill(memory, 30)
    for _ in range(200):
        batch = memory.sample(16)
        # a state and its successor are consecutive frames of one stream: (t-1 or t, t) -> t+1 with reward t+1
        assert (batch.next_states[:, -1] == batch.rewards).all()
        assert set(batch.rewards.tolist()) <= {29.0, 30.0}  # older stacks reach into overwritten frames


def test_several_memories_sample_as_one():
    memories = [_memory(streams=1, seed=s) for s in (1, 2)]
    _fill(memories[0], 1, td=lambda t: np.array([1.0]))
    _fill(memories[1], 1, td=lambda t: np.array([3.0]))
    owners = np.concatenate([sample_batch(memories, 8, 1.0).positions[:, 0] for _ in range(500)])
    assert abs(owners.mean() - 0.75) < 0.02


def test_weights_scale_the_loss_and_td_errors_come_back():
    q = torch.tensor([[1.0, 2.0], [0.0, 3.0]])
    actions, targets = torch.tensor([0, 1]), torch.tensor([1.5, 0.0])
    assert td_loss(q, actions, targets, torch.ones(2)) == pytest.approx(float(td_loss(q, actions, targets)))
    # Huber terms: 0.5 * 0.5^2 = 0.125 and 3 - 0.5 = 2.5; weighted [1, 0] -> mean 0.0625
    assert float(td_loss(q, actions, targets, torch.tensor([1.0, 0.0]))) == pytest.approx(0.0625)
    memory = _memory(streams=1)
    _fill(memory, 4, td=lambda t: np.array([1.0]))
    learner = Learner(nn.Sequential(nn.Linear(1, 2)), OptimizerConfig(), 0.9, 10)
    stats = replay_gradient(learner, memory.sample(4, beta=0.5))
    assert stats.td_errors is not None and stats.td_errors.shape == (4,) and (stats.td_errors >= 0).all()
