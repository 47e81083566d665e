"""PQN's rules (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning"): a rollout of T vector
steps of fresh transitions, its Q(lambda) returns under the weights of the moment, and the training step
that regresses Q(s, a) towards them in a few epochs of minibatches, each gradient pushed to a
`ParameterSource` (the learner's own optimizer in serial mode, the parameter server in downpour, the
all-reduce in data-parallel). `ddq.core.algorithms.pqn` is the algorithm that trains with them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from ddq.core.learner import GradientStats, Learner
from ddq.core.replay import FrameStacker
from ddq.core.weights import ParameterSource


def q_lambda_returns(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, valid: torch.Tensor,
                     next_values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Q(lambda) returns of a rollout of T vector steps of N envs (each argument T x N), computed backwards.

    Row t is transition t of each env: its reward, whether its episode `terminated` there or was
    `truncated` (a time limit: the state after it still has a future), whether it is `valid` (with
    next-step autoreset, the step after an episode's end only resets the env: no transition), and
    `next_values`, max_a Q(s', a) of the state s' it led to (for the last row, the state the next
    rollout starts from). The returns blend one-step targets with longer ones:

        G_t = r_t + gamma * ((1 - lambda) * max_a Q(s_t+1, a) + lambda * G_t+1)   within the rollout's episode
        G_t = r_t + gamma * max_a Q(s_t+1, a)    at a truncation and on the last row (what follows is unseen)
        G_t = r_t                                at a termination

    lambda 0 is the one-step Q-learning target; lambda 1 the discounted return to the end of the
    episode or rollout, bootstrapped there. Invalid rows get 0: the loss leaves them out.
    """
    returns = torch.zeros_like(rewards)
    following = next_values[-1]  # G_t+1 of the row after the last: unseen, so its bootstrap value
    for t in reversed(range(rewards.shape[0])):
        cut = terminated[t] | truncated[t] if t < rewards.shape[0] - 1 else torch.ones_like(terminated[t])
        blended = torch.where(cut, next_values[t], (1 - lam) * next_values[t] + lam * following)
        step = rewards[t] + gamma * (~terminated[t]).float() * blended
        returns[t] = torch.where(valid[t], step, torch.zeros_like(step))
        following = returns[t]
    return returns


class Rollout:
    """T vector steps of an actor, as its transition sink: the states acted in (single frames: PQN runs
    with frame_stack 1), actions, rewards, terminations and which rows are transitions."""

    def __init__(self, steps: int, num_envs: int, observation_space: Any):
        self.steps = steps
        self.stacker = FrameStacker.for_space(num_envs, observation_space, 1)
        shape = self.stacker.states().shape[1:]
        self.states = np.zeros((steps + 1, num_envs, *shape), dtype=self.stacker.frames.dtype)
        self.actions = np.zeros((steps, num_envs), dtype=np.int64)
        self.rewards = np.zeros((steps, num_envs), dtype=np.float32)
        self.terminated = np.zeros((steps, num_envs), dtype=bool)
        self.valid = np.zeros((steps, num_envs), dtype=bool)
        self.size = 0

    @property
    def full(self) -> bool:
        return self.size == self.steps

    def start(self, frames: np.ndarray) -> None:
        self.states[self.size] = self.stacker.reset(frames)

    def add(self, frames: np.ndarray, actions: np.ndarray | None, rewards: np.ndarray | None,
            terminated: np.ndarray | None, continues: np.ndarray) -> None:
        t = self.size
        if t == self.steps:
            raise RuntimeError("the rollout is full: train on it, then clear it")
        self.valid[t] = continues
        if actions is not None and rewards is not None and terminated is not None:
            self.actions[t], self.rewards[t], self.terminated[t] = actions, rewards, terminated
        self.states[t + 1] = self.stacker.reset(frames)  # one frame per state: nothing to stack
        self.size += 1

    def clear(self) -> None:
        """Starts the next rollout from the state the last one ended in."""
        self.states[0] = self.states[self.size]
        self.size = 0

    def truncated(self) -> np.ndarray:
        """Rows whose episode ended without terminating: the next row only resets the env."""
        ended = np.zeros_like(self.terminated)
        ended[:-1] = self.valid[:-1] & ~self.valid[1:]
        return ended & ~self.terminated


def regression_gradient(learner: Learner, states: torch.Tensor, actions: torch.Tensor,
                        returns: torch.Tensor) -> GradientStats:
    """PQN's loss: the squared error between Q(s, a) and fixed returns; its (clipped) gradient lands in
    `learner.flat.grad`. The target network plays no part."""
    with learner.autocast():
        q_values = learner.online(states).float()
    chosen = q_values.gather(1, actions.unsqueeze(1)).squeeze(1)
    return learner.gradient_of(F.mse_loss(chosen, returns.detach()), q_values)


def train_on_rollout(learner: Learner, rollout: Rollout, source: ParameterSource, gamma: float, lam: float,
                     epochs: int, minibatches: int, rng: np.random.Generator) -> list[GradientStats]:
    """PQN's training step on a full rollout: the Q(lambda) returns under the current weights, then `epochs`
    passes over its transitions in `minibatches` shuffled minibatches, each gradient of the squared error
    pushed to `source` and the weights synced. Returns each
    gradient's statistics."""
    to, shape = learner.to_tensor, rollout.states.shape
    states = rollout.states.reshape(-1, *shape[2:])  # every state of the rollout, one per row
    with torch.no_grad():
        next_values = learner.online(to(states[shape[1]:])).float().max(dim=-1).values
    returns = q_lambda_returns(to(rollout.rewards), to(rollout.terminated), to(rollout.truncated()),
                               to(rollout.valid), next_values.reshape(rollout.rewards.shape), gamma, lam)
    rows = np.flatnonzero(rollout.valid.reshape(-1))
    actions, targets = rollout.actions.reshape(-1), returns.reshape(-1)
    stats = []
    for _ in range(epochs):
        for chosen in np.array_split(rng.permutation(rows), minibatches):
            if len(chosen) == 0:
                continue
            chosen_states, chosen_actions = states[chosen], actions[chosen]
            if learner.augmentation is not None:  # board symmetries: returns stay, boards and moves turn
                chosen_states, chosen_actions = learner.augmentation.regression(chosen_states, chosen_actions)
            gradient = regression_gradient(learner, to(chosen_states), to(chosen_actions), targets[to(chosen)])
            source.push(learner.flat.grad, samples=len(chosen), loss=gradient.loss)
            source.sync()
            stats.append(gradient)
    return stats
