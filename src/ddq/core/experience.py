"""Experience as the central learner reads it: consecutive vector steps of one actor (`ddq.core.central_learner`
learns from it; `ddq.transport.experience` defines the message that carries it between processes, which
has this shape)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Experience(Protocol):
    """Consecutive vector steps of one actor, as its replay memory would record them (`ReplayMemory.add`);
    arrays are [rows, streams, ...]. `td_errors` (initial priorities, negative where unknown) only when the
    actor computed them."""

    @property
    def actor(self) -> int: ...
    @property
    def sender(self) -> int: ...  # a number the actor drew when it started: a retried task is a new sender
    @property
    def sequence(self) -> int: ...
    @property
    def frames(self) -> np.ndarray: ...
    @property
    def actions(self) -> np.ndarray: ...
    @property
    def rewards(self) -> np.ndarray: ...
    @property
    def terminated(self) -> np.ndarray: ...
    @property
    def continues(self) -> np.ndarray: ...
    @property
    def td_errors(self) -> np.ndarray | None: ...
    @property
    def weights_version(self) -> int: ...
    @property
    def env_steps(self) -> int:
        """Transitions in the message (a row where a stream started an episode is none)."""
        ...
