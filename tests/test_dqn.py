"""DQN targets, loss and exploration against hand-computed numbers."""

import itertools

import numpy as np
import pytest
import torch

from ddq.core.dqn import (
    LinearSchedule,
    UpdateSchedule,
    double_dqn_targets,
    epsilon_greedy,
    n_step_returns,
    next_mark,
    td_loss,
)


def test_double_dqn_target_uses_online_argmax_and_target_value():
    rewards = torch.tensor([1.0, 0.0, -1.0])
    terminated = torch.tensor([False, False, True])
    next_online = torch.tensor([[1.0, 3.0], [5.0, 2.0], [0.0, 9.0]])
    next_target = torch.tensor([[10.0, 20.0], [7.0, 100.0], [4.0, 4.0]])
    targets = double_dqn_targets(rewards, terminated, next_online, next_target, gamma=0.5)
    # row 0: online picks action 1 -> target 20 -> 1 + 0.5*20; row 1: picks 0 -> 7 -> 3.5;
    # row 2 terminated: no bootstrap.
    assert targets.tolist() == [11.0, 3.5, -1.0]


def test_truncated_transitions_still_bootstrap():
    # Truncation is not termination: a False terminated flag always bootstraps.
    targets = double_dqn_targets(torch.tensor([0.0]), torch.tensor([False]), torch.tensor([[2.0]]),
                                 torch.tensor([[2.0]]), gamma=0.9)
    assert targets.item() == pytest.approx(1.8)


def test_n_step_returns_stop_at_a_termination_and_at_missing_transitions():
    rewards = np.array([[1.0, 2.0, 3.0]] * 3)
    terminated = np.array([[False, False, False], [False, True, False], [False, False, True]])
    available = np.array([[True, True, True], [True, True, True], [True, True, False]])
    returns, steps, done = n_step_returns(rewards, terminated, available, gamma=0.5)
    # Row 0: 1 + 0.5*2 + 0.25*3, bootstrapping from s_{t+3}. Row 1 terminates at its second
    # transition: 1 + 0.5*2, no bootstrap. Row 2's third transition was not recorded (a time limit
    # cut the episode, or it is the newest data): 1 + 0.5*2, then bootstrap from s_{t+2}.
    assert returns.tolist() == [2.75, 2.0, 2.0]
    assert steps.tolist() == [3, 2, 2]
    assert done.tolist() == [False, True, False]


def test_one_step_returns_are_the_one_step_target_inputs():
    returns, steps, done = n_step_returns(np.array([[0.5], [-1.0]]), np.array([[False], [True]]),
                                          np.array([[True], [True]]), gamma=0.99)
    assert returns.tolist() == [0.5, -1.0] and steps.tolist() == [1, 1] and done.tolist() == [False, True]


def test_targets_take_each_transitions_own_discount():
    # n-step: row 0 bootstraps after 2 steps (gamma^2 = 0.25), row 1 after 1 (0.5).
    targets = double_dqn_targets(torch.tensor([1.0, 1.0]), torch.tensor([False, False]),
                                 torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.tensor([[4.0, 8.0], [4.0, 8.0]]),
                                 gamma=torch.tensor([0.25, 0.5]))
    assert targets.tolist() == [3.0, 3.0]


def test_huber_loss_is_quadratic_near_zero_and_linear_far_away():
    q = torch.tensor([[0.0, 1.0], [3.0, 0.0]], requires_grad=True)
    actions = torch.tensor([1, 0])
    targets = torch.tensor([1.5, 0.0])
    # errors 0.5 (quadratic: 0.5*0.25=0.125) and 3.0 (linear: 3-0.5=2.5); mean 1.3125
    loss = td_loss(q, actions, targets)
    assert loss.item() == pytest.approx(1.3125)
    loss.backward()
    assert q.grad.tolist() == [[0.0, -0.25], [0.5, 0.0]]


def test_targets_carry_no_gradient():
    q = torch.tensor([[1.0]], requires_grad=True)
    targets = q.squeeze(1) * 2
    td_loss(q, torch.tensor([0]), targets).backward()
    assert q.grad.item() == pytest.approx(-1.0)  # d/dq of |q - const| where the error is -1


def test_linear_schedule():
    schedule = LinearSchedule(1.0, 0.1, 100)
    assert schedule(0) == 1.0 and schedule(50) == pytest.approx(0.55)
    assert schedule(100) == pytest.approx(0.1) and schedule(10_000) == pytest.approx(0.1)
    delayed = LinearSchedule(1.0, 0.1, 100, delay=20)  # stays at 1 for 20 steps, then falls over 100
    assert delayed(0) == delayed(20) == 1.0 and delayed(70) == pytest.approx(0.55)
    assert delayed(120) == pytest.approx(0.1) and delayed(10_000) == pytest.approx(0.1)



def test_update_schedule_in_lockstep_counts_vector_steps_not_transitions():
    """Data-parallel's workers pair every update in an all-reduce. By transitions, a vector step whose stream
    reset (next-step autoreset: no transition) moves one worker's rounds and not the other's; in lockstep each
    vector step counts as its slots, and both workers make the same updates."""
    plays = ([4, 3, 4, 2, 4, 4], [4, 4, 4, 4, 1, 4])  # transitions of each vector step of 4 envs

    def dues(schedule: UpdateSchedule, play: list[int]) -> list[int]:  # 1 update an env step from the 8th
        return [schedule.due(new, so_far) for new, so_far in zip(play, itertools.accumulate(play))]

    assert [dues(UpdateSchedule(1.0, 4, 8), play) for play in plays] == [[0, 0, 4, 0, 6, 4], [0, 4, 4, 4, 0, 5]]
    in_lockstep = [dues(UpdateSchedule(1.0, 4, 8, lockstep_envs=4), play) for play in plays]
    assert in_lockstep[0] == in_lockstep[1] == [0, 4, 4, 4, 4, 4]


def test_epsilon_greedy_is_greedy_at_zero_and_uniform_at_one():
    net = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]))
    states = torch.ones(3000, 2)
    rng = np.random.default_rng(0)
    assert (epsilon_greedy(net, states, 0.0, rng) == 1).all()
    counts = np.bincount(epsilon_greedy(net, states, 1.0, rng), minlength=3)
    assert counts.min() > 900


def test_bf16_precision_gives_the_fp32_gradient_to_bfloat16_accuracy():
    """precision="bf16" really runs under autocast (the gradient differs) and stays close to float32's."""
    import copy

    from torch import nn

    from ddq.core.learner import Learner
    from ddq.core.optimizers import OptimizerConfig
    from ddq.core.replay import Batch
    from ddq.core.replay_training import replay_gradient

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    network = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    batch = Batch(states=rng.standard_normal((16, 4), dtype=np.float32), actions=rng.integers(0, 2, 16),
                  rewards=rng.random(16, dtype=np.float32), next_states=rng.standard_normal((16, 4), dtype=np.float32),
                  terminated=np.zeros(16, dtype=bool))
    gradients = {}
    for precision in ("fp32", "bf16"):
        learner = Learner(copy.deepcopy(network), OptimizerConfig(), 0.9, 10, precision=precision)
        replay_gradient(learner, batch)
        gradients[precision] = learner.flat.grad.clone()
    assert not torch.equal(gradients["fp32"], gradients["bf16"])
    assert torch.nn.functional.cosine_similarity(gradients["fp32"], gradients["bf16"], dim=0) > 0.99


def test_the_learner_measures_its_telemetry_every_kth_gradient_and_clips_every_one():
    from torch import nn

    from ddq.core.learner import Learner
    from ddq.core.optimizers import OptimizerConfig
    from ddq.core.replay import Batch
    from ddq.core.replay_training import replay_gradient

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    batch = Batch(states=rng.standard_normal((8, 3), dtype=np.float32), actions=rng.integers(0, 2, 8),
                  rewards=100 * rng.random(8, dtype=np.float32), next_states=rng.standard_normal((8, 3), dtype=np.float32),
                  terminated=np.zeros(8, dtype=bool))
    learner = Learner(nn.Sequential(nn.Linear(3, 2)), OptimizerConfig(), 0.9, 10, max_grad_norm=0.5,
                      statistics_every=3)
    measured = []
    for _ in range(7):
        stats = replay_gradient(learner, batch)
        measured.append(stats.mean_max_q is not None and stats.grad_norm is not None)
        assert float(learner.flat.grad.norm()) == pytest.approx(0.5)  # rewards of ~50: every gradient is clipped
    assert measured == [True, False, False, True, False, False, True]
    with torch.no_grad():  # no update was applied: the weights are those the 7th gradient saw
        q_values = learner.online(torch.from_numpy(batch.states)).max(dim=1).values.mean()
    assert stats.mean_max_q == pytest.approx(float(q_values)) and stats.grad_norm > 0.5  # before clipping


def test_the_next_mark_is_the_first_multiple_above_the_steps():
    assert [next_mark(steps, 1000) for steps in (0, 999, 1000, 1001, 5003)] == [1000, 1000, 2000, 2000, 6000]
