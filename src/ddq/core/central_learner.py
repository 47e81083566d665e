"""The one learner of actor-learner training (Ape-X's, and Grandio's MPI learner): its state and arithmetic.

No threads, no Redis, no wire: whoever drives it (`ddq.learner_server`)
hands it decoded experience and asks it to train. The rules it keeps:

- **the replay ratio holds however many actors send**: each env step received
  after `learning_starts` earns `replay_ratio` updates (`UpdateSchedule`), and
  the updates earned and not yet done are `owed`;
- **trained steps**: the env steps received, less those whose updates are
  still owed. Actor-learner's epsilon follows this count, so exploration falls
  only as fast as the learner learns;
- **one memory per actor**, sampled as one; a message that does not follow its
  actor's last one (a lost message, a restarted actor) starts its streams anew;
- **sync rounds** (--sync): a round is finished once every actor sent it and
  nothing it earned is owed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ddq.core.dqn import UpdateSchedule, next_mark, target_refresh_due
from ddq.core.experience import Experience
from ddq.core.learner import GradientStats, Learner
from ddq.core.prioritized import annealed_beta
from ddq.core.replay import ReplayMemory
from ddq.core.replay_training import BatchGradient, replay_gradient, train_from_replay
from ddq.core.senders import SenderLedger
from ddq.core.weights import LocalParameters


@dataclass
class Trained:
    """What one update asks of whoever drives the learner."""

    stats: GradientStats
    publish: bool  # the weights are due to the actors (every publish_every updates; never inside a sync round)
    target_refreshed: bool  # the target network was refreshed by this update: it is due too
    snapshot: bool  # a snapshot is due (every snapshot_every updates)


@dataclass
class LearnerState:
    """What a snapshot of the learner holds; its replay memories refill from the actors."""

    updates: int
    target_version: int
    weights: torch.Tensor
    target: torch.Tensor
    optimizer: dict


@dataclass
class CentralSettings:
    """The learner's own rules, beside the network's and the replay's."""

    batch_size: int
    replay_ratio: float
    publish_every: int
    snapshot_every: int
    eval_every: int
    target_update: int
    priority_beta: float
    total_steps: int  # prioritized replay's beta reaches 1 here
    sync: bool = False


class CentralLearner:
    """Trains one learner on what every actor sent, at the replay ratio."""

    def __init__(self, learner: Learner, memories: list[ReplayMemory], schedule: UpdateSchedule,
                 settings: CentralSettings, trained_before: int = 0, gradient: BatchGradient = replay_gradient):
        """`trained_before`: env steps trained on by earlier learner processes of the run (a restart);
        `gradient`: the run's algorithm's loss on a replayed minibatch (DQN's, or a subclass's own)."""
        self.learner, self.memories, self.schedule, self.settings = learner, memories, schedule, settings
        self.gradient = gradient
        self.local = LocalParameters(learner)  # the learner's own optimizer applies each gradient
        self.owed = 0  # updates the experience taken so far has earned and that are not done yet
        self.ingested = 0  # env steps received by this learner
        self.trained_before = trained_before
        self.senders = SenderLedger()  # what each actor sent: a repeated message is not trained on twice
        self.messages = 0
        self.lags: list[int] = []  # how many updates old the weights were that acted, per message
        self.target_version = 0
        self.round_done = -1  # --sync: the newest round trained on and published
        self.next_eval_mark = next_mark(self.trained_steps, settings.eval_every)

    @property
    def trained_steps(self) -> int:
        """Env steps of the run the learner has caught up with: received, less those still owed."""
        behind = int(np.ceil(self.owed / self.settings.replay_ratio))
        return self.trained_before + max(self.ingested - behind, 0)

    def ingest(self, experience: Experience) -> bool:
        """Records a message's vector steps in its actor's memory and the updates they earn; False for a
        message taken before (it is dropped)."""
        memory = self.memories[experience.actor % len(self.memories)]
        continues = experience.continues
        sender = (experience.actor, experience.sender, experience.sequence + 1)  # the ledger numbers from 1
        follows = self.senders.follows(*sender)
        if not self.senders.take(*sender):
            return False
        if not follows and continues[0].any():
            continues = continues.copy()
            continues[0] = False  # the frame before it is not ours: no transition into this one
        td = experience.td_errors
        for row in range(len(continues)):
            memory.add(experience.frames[row], experience.actions[row], experience.rewards[row],
                       experience.terminated[row], continues[row], None if td is None else td[row])
        steps = int(continues.sum())
        self.ingested += steps
        self.owed += self.schedule.due(steps, self.ingested)
        self.messages += 1
        self.lags.append(max(self.learner.updates - experience.weights_version, 0))
        return True

    def train_once(self) -> Trained:
        """One gradient step on replay; the target refreshes every C updates, as the learner's rule says."""
        s = self.settings
        beta = annealed_beta(self.trained_steps, s.priority_beta, s.total_steps)
        stats = train_from_replay(self.learner, self.memories, self.local, 1, s.batch_size, beta, self.gradient)[0]
        self.owed -= 1  # before publishing: the weights go out with the env steps they were trained on
        updates = self.learner.updates
        refreshed = target_refresh_due(updates, s.target_update)
        if refreshed:
            self.target_version = updates
        # --sync publishes once a round is trained on: an actor still to sync must get the round's weights,
        # not those of the next round's first updates (a faster actor's experience may already be in)
        return Trained(stats, not s.sync and updates % s.publish_every == 0, refreshed,
                       updates % s.snapshot_every == 0)

    def evaluation_due(self) -> int | None:
        """The trained steps, once they crossed the next eval_every mark (then the mark moves on): those
        weights are evaluated as serial training's would be at that mark."""
        trained = self.trained_steps
        if trained < self.next_eval_mark:
            return None
        self.next_eval_mark = next_mark(trained, self.settings.eval_every)
        return trained

    def round_finishable(self, ready: int, nothing_queued: bool) -> bool:
        """--sync: whether round `ready` (every actor sent it) can be published as done: it is newer than the
        last one done, nothing sent is still on its way (`nothing_queued`) and nothing earned is owed."""
        return ready > self.round_done and nothing_queued and self.owed <= 0

    def finish_round(self, ready: int) -> None:
        """--sync: round `ready` is trained on and its weights published."""
        self.round_done = ready

    def take_lags(self) -> list[int]:
        lags, self.lags = self.lags, []
        return lags

    def state(self) -> LearnerState:
        return LearnerState(self.learner.updates, self.target_version, self.learner.flat.data.cpu(),
                            self.learner.target_flat.data.cpu(), self.learner.optimizer.state_dict())

    def load_state(self, saved: LearnerState) -> None:
        self.learner.flat.data.copy_(saved.weights)
        self.learner.target_flat.data.copy_(saved.target)
        self.learner.optimizer.load_state_dict(saved.optimizer)
        self.learner.updates, self.target_version = saved.updates, saved.target_version
