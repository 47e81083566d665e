"""One parameter-server shard's arithmetic: its slice of the weights, the target and the optimizer state.

No threads, no Redis, no wire: whoever drives it (`ddq.param_server.server`)
hands it decoded gradients, as `ddq.learner_server` hands the central
learner decoded experience. The rules it keeps:

- **no gradient is applied twice**: a (worker, sender, sequence) at or below
  one taken before is a repeat, refused and counted (`SenderLedger`);
- **staleness**: how many updates were applied since the gradient's weights;
  the policy it is given drops old ones or scales their learning rate;
- **the target refreshes every C updates** (`target_refresh_due`), and a
  snapshot is due every `snapshot_every` updates;
- its state (version, target, optimizer, and the sender ledger that says which
  gradients the state holds) saves and restores whole, in one step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ddq.core.dqn import target_refresh_due
from ddq.core.optimizers import FlatOptimizer
from ddq.core.senders import SenderLedger


class StalenessJudge(Protocol):
    """What to do with a gradient computed at `base_version` when the shard is at `current_version`:
    (staleness, learning-rate scale), the scale None to drop it (`ddq.param_server.staleness`)."""

    def judge(self, current_version: int, base_version: int) -> tuple[int, float | None]: ...


@dataclass(frozen=True)
class Taken:
    """What became of one gradient: `applied`, else `repeat` (taken before) or dropped as stale."""

    staleness: int
    applied: bool = False
    repeat: bool = False
    target_refreshed: bool = False  # the target was refreshed by this update: it is due to the readers too
    snapshot_due: bool = False  # every snapshot_every updates

    @property
    def stale(self) -> bool:
        return not self.applied and not self.repeat


class Shard:
    """A slice of the flat weights and everything that moves it."""

    def __init__(self, weights: torch.Tensor, optimizer: FlatOptimizer, policy: StalenessJudge, target_update: int,
                 snapshot_every: int):
        self.params = weights.clone()
        self.target = self.params.clone()
        self.optimizer, self.policy = optimizer, policy
        self.target_update, self.snapshot_every = target_update, snapshot_every
        self.version = self.target_version = 0
        self.senders = SenderLedger()  # no gradient is applied twice, even one sent or restored again

    def take(self, worker: int, sender: int, sequence: int, base_version: int, grad: torch.Tensor) -> Taken:
        """Applies one gradient computed against the weights of `base_version`, unless it repeats one taken
        before or the policy drops it as stale. The policy's error for a gradient from the future passes."""
        if not self.senders.take(worker, sender, sequence):
            return Taken(self.version - base_version, repeat=True)
        try:
            staleness, lr_scale = self.policy.judge(self.version, base_version)
        except Exception:  # refused (from the future: a shard rolled back by its restart): taken, not applied
            self.senders.drop(worker, sender, sequence)
            raise
        if lr_scale is None:
            self.senders.drop(worker, sender, sequence)
            return Taken(staleness)
        self.optimizer.step(self.params, grad, lr_scale)
        self.version += 1
        refreshed = target_refresh_due(self.version, self.target_update)
        if refreshed:
            self.target.copy_(self.params)
            self.target_version = self.version
        return Taken(staleness, applied=True, target_refreshed=refreshed,
                     snapshot_due=self.version % self.snapshot_every == 0)

    def state(self) -> dict[str, Any]:
        """What a snapshot keeps, by name: version, target_version, weights, target, optimizer (its
        `state_dict`), and the sender ledger's rows and repeats: which gradients the weights hold, so that
        a shard restored from the snapshot refuses them if they come again (a queue restored from an
        older Redis snapshot, a push sent again). The tensors are the shard's own: save them before the
        next update."""
        return {"version": self.version, "target_version": self.target_version, "weights": self.params,
                "target": self.target, "optimizer": self.optimizer.state_dict(), "senders": self.senders.state(),
                "repeats": self.senders.repeats}

    def load_state(self, version: int, target_version: int, weights: torch.Tensor, target: torch.Tensor,
                   optimizer: dict, senders: list[list[int]] | None = None, repeats: int = 0) -> None:
        """Goes on from a snapshot's state (`state`'s names; a snapshot from before the ledger was kept has
        no `senders`)."""
        self.params.copy_(weights)
        self.target.copy_(target)
        self.optimizer.load_state_dict(optimizer)
        self.version, self.target_version = version, target_version
        self.senders.load_state(senders or [], repeats)
