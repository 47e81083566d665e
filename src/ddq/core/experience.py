"""Experience: consecutive vector steps of one actor, what actor-learner's actors send and its learner
ingests (`ddq.transport.experience` carries it between processes; `ddq.core.central_learner` learns from it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Experience:
    """Consecutive vector steps of one actor, as its replay memory would record them (`ReplayMemory.add`);
    arrays are [rows, streams, ...]. `td_errors` (initial priorities, negative where unknown) only when the
    actor computed them. `ddq.transport.experience` carries it between processes."""

    actor: int
    sender: int  # a number the actor drew when it started: a retried task is a new sender
    sequence: int
    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    continues: np.ndarray
    td_errors: np.ndarray | None = None
    weights_version: int = 0
    epsilon: float = 0.0  # the actor's, for telemetry

    @property
    def env_steps(self) -> int:
        """Transitions in the message (a row where a stream started an episode is none)."""
        return int(self.continues.sum())
