"""The flat-vector optimizers match torch.optim step for step."""

import pytest
import torch

from ddq.core.optimizers import FlatOptimizer, OptimizerConfig

CASES = [
    ("sgd", dict(lr=0.1), torch.optim.SGD, dict(lr=0.1)),
    ("sgd", dict(lr=0.05, momentum=0.9, weight_decay=5e-4), torch.optim.SGD,
     dict(lr=0.05, momentum=0.9, weight_decay=5e-4)),
    ("rmsprop", dict(lr=0.01), torch.optim.RMSprop, dict(lr=0.01)),
    ("rmsprop", dict(lr=0.01, rms_decay=0.95, momentum=0.5, weight_decay=1e-3), torch.optim.RMSprop,
     dict(lr=0.01, alpha=0.95, momentum=0.5, weight_decay=1e-3)),
    ("rmsprop", dict(lr=2.5e-4, rms_decay=0.95, eps=0.01, centered=True), torch.optim.RMSprop,  # MinAtar's DQN
     dict(lr=2.5e-4, alpha=0.95, eps=0.01, centered=True)),
    ("adagrad", dict(lr=0.1), torch.optim.Adagrad, dict(lr=0.1)),
    ("adagrad", dict(lr=0.1, weight_decay=1e-2), torch.optim.Adagrad, dict(lr=0.1, weight_decay=1e-2)),
    ("nesterov", dict(lr=0.05, momentum=0.9), torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("nesterov", dict(lr=0.01, momentum=0.95, weight_decay=5e-4), torch.optim.SGD,  # Caffe's autoencoder example
     dict(lr=0.01, momentum=0.95, weight_decay=5e-4, nesterov=True)),
    ("adadelta", dict(lr=1.0), torch.optim.Adadelta, dict(lr=1.0)),
    ("adadelta", dict(lr=0.5, rho=0.95, eps=1e-8, weight_decay=5e-4), torch.optim.Adadelta,
     dict(lr=0.5, rho=0.95, eps=1e-8, weight_decay=5e-4)),
    ("adam", dict(lr=1e-3), torch.optim.Adam, dict(lr=1e-3)),
    ("adam", dict(lr=2e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=1e-2), torch.optim.Adam,
     dict(lr=2e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2)),
]


@pytest.mark.parametrize("name,ours,theirs_cls,theirs", CASES)
def test_matches_torch_optim(name, ours, theirs_cls, theirs):
    torch.manual_seed(0)
    start = torch.randn(1000)
    flat = start.clone()
    reference = torch.nn.Parameter(start.clone())
    optimizer = FlatOptimizer(OptimizerConfig(optimizer=name, **ours), flat.numel())
    reference_optimizer = theirs_cls([reference], **theirs)
    for _ in range(25):
        grad = torch.randn(1000)
        grad_copy = grad.clone()
        optimizer.step(flat, grad)
        assert torch.equal(grad, grad_copy)  # the gradient is not modified
        reference.grad = grad.clone()
        reference_optimizer.step()
    assert not torch.equal(flat, start)
    torch.testing.assert_close(flat, reference.detach(), rtol=1e-5, atol=1e-6)


def test_step_lr_policy_follows_caffe():
    config = OptimizerConfig(optimizer="sgd", lr=0.01, lr_policy="step", lr_gamma=0.1, lr_stepsize=3)
    optimizer = FlatOptimizer(config, 1)
    params = torch.zeros(1)
    rates = []
    for _ in range(7):
        rates.append(optimizer.learning_rate())
        optimizer.step(params, torch.ones(1))
    assert rates == pytest.approx([0.01] * 3 + [0.001] * 3 + [0.0001])
    assert params.item() == pytest.approx(-(0.03 + 0.003 + 0.0001))


def test_lr_scale_scales_only_that_step():
    optimizer = FlatOptimizer(OptimizerConfig(optimizer="sgd", lr=1.0), 1)
    params = torch.zeros(1)
    optimizer.step(params, torch.ones(1), lr_scale=0.25)
    optimizer.step(params, torch.ones(1))
    assert params.item() == pytest.approx(-1.25)


def test_state_round_trips():
    config = OptimizerConfig(optimizer="adam", lr=1e-2)
    a, b = FlatOptimizer(config, 10), FlatOptimizer(config, 10)
    pa, pb = torch.zeros(10), torch.zeros(10)
    for _ in range(3):
        a.step(pa, torch.ones(10))
    b.load_state_dict(a.state_dict())
    pb.copy_(pa)
    a.step(pa, torch.full((10,), 0.5))
    b.step(pb, torch.full((10,), 0.5))
    assert torch.equal(pa, pb) and b.steps == 4


def test_unknown_optimizer_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown optimizer 'lbfgs'"):
        OptimizerConfig(optimizer="lbfgs")


def test_nesterov_without_momentum_is_plain_sgd_as_in_caffe():
    """torch's SGD refuses nesterov=True with no momentum; Caffe's Nesterov solver runs it as plain SGD."""
    nesterov, sgd = (FlatOptimizer(OptimizerConfig(optimizer=name, lr=0.1), 3) for name in ("nesterov", "sgd"))
    a, b = torch.ones(3), torch.ones(3)
    for grad in (torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.5, 0.5, -1.0])):
        nesterov.step(a, grad)
        sgd.step(b, grad)
    assert torch.equal(a, b) and not nesterov.state


def test_adadelta_rho_is_a_fraction():
    with pytest.raises(ValueError, match="rho must be between 0 and 1, got 1.5"):
        OptimizerConfig(optimizer="adadelta", rho=1.5)


def test_centered_is_rmsprops_and_a_changed_state_is_named():
    with pytest.raises(ValueError, match="centered is a setting of rmsprop, not of adam"):
        OptimizerConfig(optimizer="adam", centered=True)
    saved = FlatOptimizer(OptimizerConfig(optimizer="rmsprop", centered=True), 10).state_dict()
    with pytest.raises(ValueError, match="holds grad_avg, square_avg, but these settings keep square_avg"):
        FlatOptimizer(OptimizerConfig(optimizer="rmsprop"), 10).load_state_dict(saved)
