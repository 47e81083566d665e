"""examples/dqn.py, the one-file reference, computes what serial mode computes: the same targets, loss and
gradient on the same batch with the same weights."""

import copy
import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch

from ddq.core.agent import env_spec, make_learner
from ddq.core.replay import ReplayMemory
from ddq.core.replay_training import replay_gradient
from ddq.core.settings import build_config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dqn.py"


def load_example():
    spec = importlib.util.spec_from_file_location("ddq_example_dqn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def a_batch(seed: int):
    rng = np.random.default_rng(seed)
    memory = ReplayMemory(200, 2, (4,), np.dtype(np.float32), seed=seed)
    memory.start(rng.standard_normal((2, 4)).astype(np.float32))
    for _ in range(60):
        terminated = rng.random(2) < 0.1
        memory.add(rng.standard_normal((2, 4)).astype(np.float32), rng.integers(0, 2, 2), rng.standard_normal(2),
                   terminated, np.ones(2, bool))
    batch = memory.sample(32)
    assert batch.terminated.any() and not batch.terminated.all()  # both kinds of target are exercised
    return batch


def test_the_example_computes_serial_modes_targets_loss_and_gradient():
    example = load_example()
    config = build_config({"env": "CartPole-v1", "mode": "serial", "algo": "dqn", "max_grad_norm": None})
    spec = env_spec(config.agent)
    frame_shape, num_actions = spec.frame_shape, spec.num_actions
    torch.manual_seed(0)
    learner = make_learner(config.agent, frame_shape, num_actions, torch.device("cpu"))
    learner.target_flat.data.add_(0.01 * torch.randn(learner.flat.size))  # a target that differs from Q
    q_net, target_net = copy.deepcopy(learner.online), copy.deepcopy(learner.target)
    batch = a_batch(1)

    targets, loss = example.targets_and_loss(q_net, target_net, batch, config.agent.gamma)
    loss.backward()
    stats = replay_gradient(learner, batch)

    with torch.no_grad():  # Double DQN's target by hand, with serial mode's own networks
        next_states = torch.from_numpy(batch.next_states)
        best = learner.online(next_states).argmax(dim=1)
        next_values = learner.target(next_states)[torch.arange(32), best].numpy()
    by_hand = batch.rewards + config.agent.gamma * (1 - batch.terminated) * next_values
    np.testing.assert_allclose(targets.numpy(), by_hand, rtol=1e-5, atol=1e-6)
    assert abs(float(loss.detach()) - stats.loss) < 1e-6
    example_gradient = torch.cat([p.grad.flatten() for p in q_net.parameters()])
    torch.testing.assert_close(example_gradient, learner.flat.grad, rtol=1e-5, atol=1e-7)
