"""The DQN rules every mode shares: targets, loss, exploration schedule, action choice."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


def double_dqn_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_online_q: torch.Tensor,
                       next_target_q: torch.Tensor, gamma: float | torch.Tensor) -> torch.Tensor:
    """r + gamma * Q_target(s', argmax_a Q_online(s', a)), without bootstrapping past a termination.

    A time-limit truncation is not a termination: those transitions bootstrap,
    since the state after them still has a future. With n-step returns, r is the
    discounted n-step return and `gamma` each transition's gamma^m (`n_step_returns`).
    """
    best = next_online_q.argmax(dim=1, keepdim=True)
    next_value = next_target_q.gather(1, best).squeeze(1)
    return rewards + gamma * (1.0 - terminated.float()) * next_value


def dqn_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_target_q: torch.Tensor,
                gamma: float | torch.Tensor) -> torch.Tensor:
    """r + gamma * max_a Q_target(s', a): the original DQN target (and the original ddq's)."""
    return rewards + gamma * (1.0 - terminated.float()) * next_target_q.max(dim=1).values


def n_step_returns(rewards: np.ndarray, terminated: np.ndarray, available: np.ndarray,
                   gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns (Sutton & Barto 7.1; Rainbow's multi-step targets) from the next n transitions.

    Row b holds transitions t, t+1, ..., t+n-1 of one episode: their `rewards`, whether each
    `terminated`, and whether each is `available` (recorded in the same episode; t itself always is).
    The window stops after a termination or before the first unavailable transition (an episode cut
    by a time limit, or the newest data), so it spans m <= n transitions. Returns, per row:
    R = sum_{k<m} gamma^k r_{t+k}; the steps m (the next state is s_{t+m}); and whether the window
    ended in a termination, so that the target R + gamma^m max_a Q(s_{t+m}, a) does not bootstrap.
    With n = 1 this is the one-step target's r, 1 and terminated.
    """
    rows, n = rewards.shape
    returns = np.zeros(rows, dtype=np.float32)
    steps = np.zeros(rows, dtype=np.int64)
    ended = np.zeros(rows, dtype=bool)
    done = np.zeros(rows, dtype=bool)
    for k in range(n):
        live = ~ended & (available[:, k] if k else True)
        returns += np.where(live, gamma ** k * rewards[:, k], 0).astype(np.float32)
        steps += live
        done |= live & terminated[:, k]
        ended |= ~live | terminated[:, k]
    return returns, steps, done


def td_loss(q_values: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor,
            weights: torch.Tensor | None = None) -> torch.Tensor:
    """Huber (smooth L1, delta 1) loss between Q(s, a) and the fixed targets; with prioritized replay,
    each transition's term is scaled by its importance weight before the mean."""
    chosen = q_values.gather(1, actions.unsqueeze(1)).squeeze(1)
    if weights is None:
        return F.smooth_l1_loss(chosen, targets.detach())
    return (weights * F.smooth_l1_loss(chosen, targets.detach(), reduction="none")).mean()


def td_errors(q_values: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """|target - Q(s, a)| per transition: what prioritized replay ranks transitions by."""
    return (targets - q_values.gather(1, actions.unsqueeze(1)).squeeze(1)).abs()


def linearly_decaying_epsilon(step: int, start: float, end: float, duration: int, delay: int = 0) -> float:
    """Epsilon stays at `start` for the first `delay` env steps, falls linearly to `end` over the next
    `duration`, then stays at `end` (Dopamine's warm-up: MinAtar's DQN plays 5,000 random frames before
    its epsilon starts to fall).

    Which step count drives it is the mode's choice, and the same choice everywhere
    in that mode: serial training passes its own env steps; a downpour Barista passes
    the run's global env-step count (all workers' steps, summed in Redis), so every
    worker explores as much as the run as a whole has earned, however many workers
    there are; the driver's progress points report the same global value; an actor-learner
    actor passes the env steps its learner has trained on. The delay counts the same steps.
    """
    fraction = min(max(step - delay, 0) / max(duration, 1), 1.0)
    return start + fraction * (end - start)


@dataclass
class LinearSchedule:
    """`linearly_decaying_epsilon` with its settings bound: call it with the step count that drives it."""

    start: float = 1.0
    end: float = 0.05
    duration: int = 10_000
    delay: int = 0

    def __call__(self, step: int) -> float:
        return linearly_decaying_epsilon(step, self.start, self.end, self.duration, self.delay)


def target_refresh_due(updates: int, period: int) -> bool:
    """Whether the target network is copied from the online one after update number `updates`: every
    `period` (C) updates, the original's "special update" copying Q into P. The serial learner and
    every parameter-server shard ask this one rule."""
    return updates % period == 0


def last_target_refresh(updates: int, period: int) -> int:
    """The update after which the target network was last copied (`target_refresh_due`): its version."""
    return updates - updates % period


def next_mark(steps: int, every: int) -> int:
    """The first multiple of `every` above `steps`: when a periodic event (an evaluation, a log line, a
    checkpoint) is next due. Serial training, the distributed driver and the learner ask this one rule."""
    return (steps // every + 1) * every


def epsilon_greedy(q_net: nn.Module, states: torch.Tensor, epsilon: float,
                   rng: np.random.Generator) -> np.ndarray:
    """argmax_a Q(s, a) per state, replaced by a uniformly random action with probability epsilon."""
    with torch.no_grad():
        q_values = q_net(states)
    return epsilon_greedy_actions(q_values.cpu().numpy(), epsilon, rng)


def epsilon_greedy_actions(q_values: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """`epsilon_greedy` from Q-values already computed (an actor that also keeps them, for priorities)."""
    actions = q_values.argmax(axis=1)
    if epsilon > 0:
        explore = rng.random(len(actions)) < epsilon
        actions[explore] = rng.integers(0, q_values.shape[1], size=int(explore.sum()))
    return actions


def per_actor_epsilon(actor: int, actors: int, base: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X's fixed exploration rate of actor i of N: eps^(1 + alpha * i / (N - 1)), from `base` (0.4)
    for actor 0 down to 0.4^8 (about 0.0007) for the last; one actor explores at `base`."""
    return base ** (1 + alpha * actor / (actors - 1)) if actors > 1 else base


class UpdateSchedule:
    """How many gradient updates are due: `replay_ratio` per env step once `learning_starts` steps
    were played, done in rounds every `train_frequency` steps. Serial training and every worker use it.

    `lockstep_envs` (data-parallel's workers, whose every update is an all-reduce the others must pair):
    each vector step counts as that many env steps, by the schedule's own count, whatever its streams did.
    A stream's reset step is no transition (next-step autoreset), and falls at a different step in each
    worker: counted by transitions, their updates had drifted apart and gloo failed on the mismatch."""

    def __init__(self, replay_ratio: float, train_frequency: int, learning_starts: int,
                 lockstep_envs: int | None = None):
        self.replay_ratio, self.train_frequency, self.learning_starts = replay_ratio, train_frequency, learning_starts
        self.credit = 0.0
        self.since_round = 0
        self.lockstep_envs, self.slots = lockstep_envs, 0  # the vector steps' slots so far, when in lockstep

    def due(self, new_steps: int, steps_so_far: int) -> int:
        """The updates due once the actor's latest vector step brought `new_steps` transitions, and its
        total to `steps_so_far` (called once a vector step)."""
        if self.lockstep_envs is not None:
            self.slots += self.lockstep_envs
            new_steps, steps_so_far = self.lockstep_envs, self.slots
        if steps_so_far < self.learning_starts:
            return 0
        self.credit += self.replay_ratio * new_steps
        self.since_round += new_steps
        if self.since_round < self.train_frequency:
            return 0
        self.since_round = 0
        updates = int(self.credit)
        self.credit -= updates
        return updates
