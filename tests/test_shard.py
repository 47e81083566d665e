"""A parameter-server shard's arithmetic without Redis: exact SGD steps, staleness dropped or scaled, repeats
refused and counted, the target refreshed every C updates, snapshots due every N, and its state round trip."""

import pytest
import torch

from ddq.core.optimizers import FlatOptimizer, OptimizerConfig
from ddq.core.shard import Shard
from ddq.param_server.staleness import StalenessPolicy
from ddq.transport.wire import WireError

SIZE, LR = 4, 0.5


def make(policy: StalenessPolicy | None = None, target_update: int = 3, snapshot_every: int = 2,
         optimizer: str = "sgd") -> Shard:
    return Shard(torch.ones(SIZE), FlatOptimizer(OptimizerConfig(optimizer=optimizer, lr=LR), SIZE),
                 policy or StalenessPolicy(), target_update, snapshot_every)


def grad(value: float = 1.0) -> torch.Tensor:
    return torch.full((SIZE,), value)


def test_a_gradient_moves_the_weights_by_one_sgd_step_and_bumps_the_version():
    shard = make()
    taken = shard.take(worker=0, sender=1, sequence=1, base_version=0, grad=grad(2.0))
    assert taken.applied and not taken.repeat and not taken.stale and taken.staleness == 0
    assert torch.equal(shard.params, torch.full((SIZE,), 1.0 - LR * 2.0)) and shard.version == 1
    assert torch.equal(shard.target, torch.ones(SIZE))  # the target waits for its C updates


def test_stale_gradients_are_dropped_beyond_the_limit_and_scaled_within_it():
    limited = make(StalenessPolicy(max_staleness=1))
    for sequence in (1, 2):
        limited.take(0, 1, sequence, limited.version, grad())
    dropped = limited.take(0, 1, 3, base_version=0, grad=grad())  # two updates behind, over the limit of one
    assert dropped.stale and dropped.staleness == 2 and limited.version == 2
    scaled = make(StalenessPolicy(scaling=True))
    for sequence in (1, 2):
        scaled.take(0, 1, sequence, scaled.version, grad())
    before = scaled.params.clone()
    taken = scaled.take(0, 1, 3, base_version=0, grad=grad())  # staleness 2: half the learning rate
    assert taken.applied and taken.staleness == 2
    assert torch.allclose(scaled.params, before - LR / 2)


def test_a_gradient_from_the_future_is_refused_by_the_policy_and_counted_as_dropped():
    shard = make()  # as a shard rolled back by its restart meets a gradient computed on its lost updates
    with pytest.raises(WireError, match="future_version"):
        shard.take(0, 1, 1, base_version=5, grad=grad())
    assert shard.version == 0 and shard.senders.account() == [
        {"sender": 0, "incarnation": 1, "sent": 1, "applied": 0, "dropped": 1, "repeats": 0, "lost": 0}]


def test_a_repeated_sender_and_sequence_is_refused_and_counted():
    shard = make()
    assert shard.take(worker=2, sender=7, sequence=1, base_version=0, grad=grad()).applied
    before = shard.params.clone()
    again = shard.take(worker=2, sender=7, sequence=1, base_version=0, grad=grad())
    assert again.repeat and not again.applied and not again.stale
    assert torch.equal(shard.params, before) and shard.version == 1 and shard.senders.repeats == 1
    assert shard.take(worker=2, sender=8, sequence=1, base_version=1, grad=grad()).applied  # a new sender
    assert shard.take(worker=2, sender=7, sequence=0, base_version=2, grad=grad()).applied  # 0: unnumbered


def test_the_target_refreshes_every_c_updates_and_snapshots_fall_due_every_n():
    shard = make(target_update=3, snapshot_every=2)
    marks = [shard.take(0, 1, k + 1, shard.version, grad(0.1)) for k in range(6)]
    assert [m.target_refreshed for m in marks] == [False, False, True, False, False, True]
    assert [m.snapshot_due for m in marks] == [False, True, False, True, False, True]
    assert shard.target_version == 6 and torch.equal(shard.target, shard.params)
    shard.take(0, 1, 7, shard.version, grad(0.1))
    assert shard.target_version == 6 and not torch.equal(shard.target, shard.params)


def test_its_state_round_trips_into_a_new_shard():
    shard = make(optimizer="adam")
    for k in range(4):
        shard.take(0, 1, k + 1, shard.version, grad(0.1 * (k + 1)))
    saved = shard.state()
    restored = make(optimizer="adam")
    restored.load_state(**saved)
    assert (restored.version, restored.target_version) == (4, 3)
    assert torch.equal(restored.params, shard.params) and torch.equal(restored.target, shard.target)
    for twin in (shard, restored):
        twin.take(0, 2, 1, twin.version, grad(0.3))
    assert torch.equal(restored.params, shard.params)  # the optimizer's moments came along


def test_a_restored_shard_refuses_what_its_snapshot_already_holds():
    """The sender ledger travels with the state: gradients the snapshot's weights hold are repeats after a
    restore (a queue restored from an older Redis snapshot pops them again), those after it are new."""
    shard = make()
    for sequence in (1, 2, 3):
        shard.take(0, 5, sequence, shard.version, grad())
    saved = shard.state()
    restored = make()
    restored.load_state(**saved)
    before = restored.params.clone()
    again = restored.take(0, 5, 2, restored.version, grad())
    assert again.repeat and restored.version == 3 and torch.equal(restored.params, before)
    assert restored.senders.repeats == 1
    assert restored.take(0, 5, 4, restored.version, grad()).applied and restored.version == 4
