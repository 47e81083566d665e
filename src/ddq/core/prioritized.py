"""Prioritized experience replay's rules (Schaul et al. 2016, proportional; Ape-X's initial priorities).

A transition i of priority p_i = (|delta_i| + eps)^alpha is sampled with
probability P(i) = p_i / sum_k p_k, and its gradient is weighted by the
importance weight w_i = (n * P(i))^-beta, normalised by the largest weight
in its minibatch (as Dopamine does) so that weights only ever scale a step
down. Beta anneals linearly to 1 over the run: early, biased sampling is
cheap; at the end the updates must be unbiased. The `SumTree` finds the
transition a uniform draw in [0, sum p) lands on in O(log n).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PrioritySettings:
    """`alpha`: how much priorities matter (0 is uniform); `beta_start`: the importance-weight exponent at
    the start, annealed to 1 over `beta_steps` env steps; `eps`: keeps every transition sampleable."""

    alpha: float = 0.6
    beta_start: float = 0.4
    beta_steps: int = 1_000_000
    eps: float = 1e-3


def annealed_beta(step: int, start: float, duration: int) -> float:
    """Beta rises linearly from `start` to 1 over the first `duration` env steps, then stays at 1."""
    return start + min(max(step, 0) / max(duration, 1), 1.0) * (1.0 - start)


def priority(td_errors: np.ndarray, settings: PrioritySettings) -> np.ndarray:
    """p = (|delta| + eps)^alpha: what the sum tree stores for transitions of these TD errors."""
    return (np.abs(td_errors) + settings.eps) ** settings.alpha


def importance_weights(probabilities: np.ndarray, beta: float) -> np.ndarray:
    """w_i = (n * P(i))^-beta / max_j w_j over the minibatch: corrects the bias of non-uniform sampling.
    Normalised by the minibatch's largest weight, the memory's size n cancels out."""
    weights = probabilities.astype(np.float64) ** -beta
    return (weights / weights.max()).astype(np.float32)


def initial_td_errors(q_now: np.ndarray, actions: np.ndarray, returns: np.ndarray, ended: np.ndarray,
                      q_next: np.ndarray, discounts: np.ndarray | float) -> np.ndarray:
    """Ape-X's actor-side priorities: |R + discount * max_a Q(s', a) - Q(s, a)| from the Q-values an actor
    already computed to act (its own copy of the online network). One-step: R = r, discount = gamma, s' the
    next state; n-step: R, the steps m and whether the window `ended` in a termination as `n_step_returns`
    gives them, discount = gamma^m and s' = s_{t+m}. No bootstrap past a termination."""
    chosen = np.take_along_axis(q_now, actions[:, None], axis=1)[:, 0]
    bootstrap = np.where(ended, 0.0, np.asarray(discounts) * q_next.max(axis=1))
    return np.abs(returns + bootstrap - chosen).astype(np.float32)


class SumTree:
    """A binary tree whose leaves hold priorities and whose inner nodes hold the sums below them."""

    def __init__(self, capacity: int):
        self.leaves = 1 << max(int(capacity) - 1, 1).bit_length()
        self.capacity = capacity
        self.nodes = np.zeros(2 * self.leaves, dtype=np.float64)  # node 1 is the root; leaf i is node leaves+i

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.nodes[self.leaves + np.asarray(indices)]

    def set(self, indices: np.ndarray, priorities: np.ndarray | float) -> None:
        """Sets leaves (the last value wins for a repeated index) and recomputes the sums above them."""
        nodes = self.leaves + np.asarray(indices, dtype=np.int64).ravel()
        if nodes.size == 0:
            return
        self.nodes[nodes] = priorities
        while nodes[0] > 1:
            nodes = np.unique(nodes // 2)
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each value in [0, total): the leaf where the running sum of priorities passes it."""
        nodes = np.ones(len(values), dtype=np.int64)
        values = np.array(values, dtype=np.float64)
        while nodes[0] < self.leaves:
            left = 2 * nodes
            go_right = values >= self.nodes[left]
            values -= np.where(go_right, self.nodes[left], 0.0)
            nodes = left + go_right
        return nodes - self.leaves

    def stratified(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """`batch_size` leaves drawn with probability proportional to priority, one from each of as many
        equal slices of [0, total) (less variance than independent draws); never a zero-priority leaf."""
        total = self.total
        if total <= 0:
            raise ValueError("no transition has a priority yet")
        values = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        leaves = self.find(np.minimum(values, np.nextafter(total, 0)))
        for _ in range(100):  # rounding can land on an empty leaf beside a boundary: draw those again
            empty = self.get(leaves) <= 0
            if not empty.any():
                return leaves
            leaves[empty] = self.find(rng.random(int(empty.sum())) * total)
        raise ValueError("could not draw transitions with a priority")
