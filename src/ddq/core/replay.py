"""Replay memory that stores each frame once and stacks frames only when sampling.

Transitions come from `num_streams` envs stepped in lockstep (a vector env),
so every vector step writes one frame per stream. Stacked states are built at
sampling time from the stored frames, and never reach across an episode
start: frames before it are replaced by the episode's first frame, exactly as
`FrameStacker` does for the acting side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from ddq.core.dqn import n_step_returns
from ddq.core.prioritized import PrioritySettings, SumTree, importance_weights, priority
from ddq.gamesim.spec import frame_layout
from ddq.run_folder import write_whole


def state_shape(frame_shape: tuple[int, ...], frame_stack: int) -> tuple[int, ...]:
    """Images stack along a new leading axis; vectors concatenate (unchanged when k=1)."""
    if len(frame_shape) >= 2:
        return (frame_stack, *frame_shape)
    return (frame_stack * frame_shape[0],) if frame_shape else (frame_stack,)


def _stack(frames: list[np.ndarray], frame_shape: tuple[int, ...]) -> np.ndarray:
    if len(frame_shape) >= 2:
        return np.stack(frames, axis=1)
    return np.concatenate(frames, axis=1) if len(frames) > 1 else frames[0]


@dataclass
class Batch:
    """A minibatch of transitions as NumPy arrays (frames keep their stored dtype)."""

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_states: np.ndarray
    terminated: np.ndarray
    weights: np.ndarray | None = None  # importance weights (prioritized replay), else None
    positions: np.ndarray | None = None  # (memory, slot * streams + stream) of each, to update priorities
    discounts: np.ndarray | None = None  # gamma^m of each n-step return (None: one-step, the learner's gamma)


class ReplayMemory:
    """A fixed-capacity circular buffer of transitions from lockstep env streams; with `prioritized`
    settings, it also keeps each transition's priority (`ddq.core.prioritized`) in a sum tree. With
    `n_step` > 1 a sampled transition carries the discounted return of the next n (`n_step_returns`)."""

    def __init__(self, capacity: int, num_streams: int, frame_shape: tuple[int, ...],
                 frame_dtype: np.dtype, frame_stack: int = 1, seed: int | None = None,
                 prioritized: PrioritySettings | None = None, n_step: int = 1, gamma: float = 0.99):
        self.slots = max(2 + frame_stack, -(-capacity // num_streams))
        self.num_streams = num_streams
        self.frame_shape = tuple(frame_shape)
        self.frame_stack = frame_stack
        shape = (self.slots, num_streams)
        self.frames = np.zeros(shape + self.frame_shape, dtype=frame_dtype)
        self.actions = np.zeros(shape, dtype=np.int64)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.first = np.zeros(shape, dtype=bool)  # frame starts an episode
        self.has_next = np.zeros(shape, dtype=bool)  # a transition leaves this frame
        self.written = 0  # frames written per stream, over all time
        self.rng = np.random.default_rng(seed)
        self.prioritized = prioritized
        self.tree = SumTree(self.slots * num_streams) if prioritized else None
        self.max_priority = 1.0  # a new transition's priority when none is given: sampled soon, as in PER
        self.n_step, self.gamma = n_step, gamma

    def __len__(self) -> int:
        """Transitions that can be sampled now."""
        return int(self.has_next.sum())

    def start(self, frames: np.ndarray) -> None:
        """Record the first frames of every stream's first episode."""
        self.add(frames, None, None, None, np.zeros(self.num_streams, dtype=bool))

    def add(self, frames: np.ndarray, actions: np.ndarray | None, rewards: np.ndarray | None,
            terminated: np.ndarray | None, continues: np.ndarray, td_errors: np.ndarray | None = None) -> None:
        """Record one vector step.

        `frames` are the observations the step returned. Where `continues`
        is True they follow the previous frame through `actions` with
        `rewards` and `terminated`; elsewhere they start a new episode (an
        env reset, which is not a transition). `td_errors` (prioritized replay):
        the new transitions' initial TD errors, when the actor computed them
        (negative: unknown); unknown ones get the largest priority so far.
        """
        slot = self.written % self.slots
        if self.tree is not None:
            self._retire(slot)
        self.frames[slot] = as_frames(frames, self.frame_shape)
        self.first[slot] = ~continues
        self.has_next[slot] = False
        if self.written > 0:
            prev = (self.written - 1) % self.slots
            self.has_next[prev] = continues
            self.actions[prev] = np.where(continues, actions, 0) if actions is not None else 0
            self.rewards[prev] = np.where(continues, rewards, 0) if rewards is not None else 0
            self.terminated[prev] = continues & terminated if terminated is not None else False
            if self.tree is not None:
                self._prioritize(prev, continues, td_errors)
        self.written += 1

    def _retire(self, slot: int) -> None:
        """Overwriting `slot` ends its transition and those whose stacked states reach back into it."""
        assert self.tree is not None
        slots = (slot + np.arange(self.frame_stack)) % self.slots
        self.tree.set((slots[:, None] * self.num_streams + np.arange(self.num_streams)).ravel(), 0.0)

    def _prioritize(self, slot: int, continues: np.ndarray, td_errors: np.ndarray | None) -> None:
        assert self.tree is not None and self.prioritized is not None
        new = np.full(self.num_streams, self.max_priority)
        if td_errors is not None:
            known = np.asarray(td_errors) >= 0
            new[known] = priority(np.asarray(td_errors)[known], self.prioritized)
            self.max_priority = max(self.max_priority, float(new.max(initial=0)))
        self.tree.set(slot * self.num_streams + np.arange(self.num_streams), np.where(continues, new, 0.0))

    def update_priorities(self, positions: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities from the TD errors of a minibatch just trained on (positions as `sample` gave)."""
        assert self.tree is not None and self.prioritized is not None
        new = priority(td_errors, self.prioritized)
        live = self.tree.get(positions) > 0  # a transition overwritten since it was sampled stays retired
        self.tree.set(positions[live], new[live])
        self.max_priority = max(self.max_priority, float(new.max(initial=0)))

    def sample(self, batch_size: int, beta: float = 1.0) -> Batch:
        """Random transitions, states stacked within their episodes: uniformly, or in proportion to their
        priorities (with importance weights of exponent `beta`) when the memory is prioritized."""
        if self.tree is not None:
            return sample_prioritized([self], batch_size, beta, self.rng)
        index, stream = self._sample_indices(batch_size)
        return self.gather(index, stream)

    def gather(self, index: np.ndarray, stream: np.ndarray) -> Batch:
        """The transitions leaving frame `index` (absolute, or a slot) of each `stream`."""
        states = self._stacked(index, stream)
        slot = index % self.slots
        if self.n_step == 1:
            return Batch(states, self.actions[slot, stream], self.rewards[slot, stream],
                         self._stacked(index + 1, stream), self.terminated[slot, stream])
        # The window never passes the newest frame: its has_next is False until a successor is written.
        ahead = (index[:, None] + np.arange(self.n_step)) % self.slots
        returns, steps, terminated = n_step_returns(self.rewards[ahead, stream[:, None]],
                                                    self.terminated[ahead, stream[:, None]],
                                                    self.has_next[ahead, stream[:, None]], self.gamma)
        return Batch(states, self.actions[slot, stream], returns, self._stacked(index + steps, stream), terminated,
                     discounts=(self.gamma ** steps).astype(np.float32))

    def _sample_indices(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        # Oldest frame whose whole stack is still stored; the newest frame has no successor yet.
        low = 0 if self.written <= self.slots else self.written - self.slots + self.frame_stack - 1
        high = self.written - 1
        if high <= low or not self.has_next.any():
            raise ValueError("the replay memory holds no transitions yet")
        index = np.empty(batch_size, dtype=np.int64)
        stream = np.empty(batch_size, dtype=np.int64)
        todo = np.arange(batch_size)
        for _ in range(1000):  # rejection sampling: few frames are episode ends
            index[todo] = self.rng.integers(low, high, size=todo.size)
            stream[todo] = self.rng.integers(0, self.num_streams, size=todo.size)
            todo = todo[~self.has_next[index[todo] % self.slots, stream[todo]]]
            if todo.size == 0:
                return index, stream
        raise ValueError("could not sample transitions: too few in the replay window")

    def _stacked(self, index: np.ndarray, stream: np.ndarray) -> np.ndarray:
        positions = [index]
        for _ in range(self.frame_stack - 1):
            cur = positions[0]
            positions.insert(0, np.where(self.first[cur % self.slots, stream], cur, cur - 1))
        return _stack([self.frames[p % self.slots, stream] for p in positions], self.frame_shape)

    # ------------------------------------------------------------ checkpoints
    _ARRAYS = ("frames", "actions", "rewards", "terminated", "first", "has_next")

    def save(self, path: str) -> None:
        """Write the whole memory to an .npz file of plain arrays (np.load refuses object arrays), whole or
        not at all: a kill or a full disk mid-write leaves the previous file as it was."""
        write_whole(path, self.writer())

    def writer(self) -> Callable[[BinaryIO], None]:
        """What `save` writes, for a caller that writes it together with other files (a checkpoint)."""
        extra: dict[str, Any] = {"priorities": self.tree.nodes, "max_priority": self.max_priority} if self.tree else {}
        return lambda file: np.savez(file, written=np.int64(self.written), **extra,
                                     **{name: getattr(self, name) for name in self._ARRAYS})

    def load(self, path: str) -> None:
        with np.load(path) as saved:
            for name in self._ARRAYS:
                if saved[name].shape != getattr(self, name).shape:
                    raise ValueError(f"replay file {path} has {name} of shape {saved[name].shape}, "
                                     f"expected {getattr(self, name).shape}")
                getattr(self, name)[...] = saved[name]
            self.written = int(saved["written"])
            if self.tree is not None:
                if "priorities" not in saved or saved["priorities"].shape != self.tree.nodes.shape:
                    raise ValueError(f"replay file {path} holds no priorities for this memory")
                self.tree.nodes[...] = saved["priorities"]
                self.max_priority = float(saved["max_priority"])


def sample_prioritized(memories: Sequence[ReplayMemory], batch_size: int, beta: float,
                       rng: np.random.Generator) -> Batch:
    """A minibatch drawn across prioritized memories (a learner keeps one per actor) as if from one:
    P(i) = p_i / (sum of every memory's priorities), stratified over that sum."""
    totals = np.array([memory.tree.total if memory.tree else 0.0 for memory in memories])
    if totals.sum() <= 0:
        raise ValueError("the replay memory holds no transitions yet")
    values = (np.arange(batch_size) + rng.random(batch_size)) * (totals.sum() / batch_size)
    owner = np.minimum(np.searchsorted(np.cumsum(totals), values, side="right"), len(memories) - 1)
    while (totals[owner] <= 0).any():  # a value at an empty memory's edge: give it to a memory with priorities
        owner[totals[owner] <= 0] = rng.choice(np.flatnonzero(totals > 0), int((totals[owner] <= 0).sum()))
    parts, probabilities, positions = [], [], []
    for m in np.unique(owner):
        memory, tree = memories[m], memories[m].tree
        assert tree is not None
        chosen = tree.stratified(int((owner == m).sum()), rng)
        parts.append(memory.gather(chosen // memory.num_streams, chosen % memory.num_streams))
        probabilities.append(tree.get(chosen) / totals.sum())
        positions.append(np.stack([np.full(len(chosen), m), chosen], axis=1))
    batch = _joined(parts)
    batch.weights = importance_weights(np.concatenate(probabilities), beta)
    batch.positions = np.concatenate(positions)
    return batch


def sample_batch(memories: Sequence[ReplayMemory], batch_size: int, beta: float = 1.0) -> Batch:
    """A minibatch from one memory or several (a learner's, one per actor) as if they were one: in
    proportion to priorities when prioritized, else uniformly over every stored transition."""
    if memories[0].tree is not None:
        return sample_prioritized(memories, batch_size, beta, memories[0].rng)
    if len(memories) == 1:
        return memories[0].sample(batch_size)
    sizes = np.array([len(memory) for memory in memories], dtype=np.float64)
    if sizes.sum() <= 0:
        raise ValueError("the replay memory holds no transitions yet")
    counts = memories[0].rng.multinomial(batch_size, sizes / sizes.sum())
    return _joined([memories[m].sample(int(count)) for m, count in enumerate(counts) if count])


def _joined(parts: list[Batch]) -> Batch:
    batch = Batch(*(np.concatenate([getattr(part, name) for part in parts]) for name in
                    ("states", "actions", "rewards", "next_states", "terminated")))
    if parts[0].discounts is not None:
        batch.discounts = np.concatenate([part.discounts for part in parts if part.discounts is not None])
    return batch


def update_priorities(memories: Sequence[ReplayMemory], positions: np.ndarray, td_errors: np.ndarray) -> None:
    """Gives the transitions of a prioritized minibatch (`Batch.positions`) the priorities of their new TD errors."""
    for m in np.unique(positions[:, 0]):
        mine = positions[:, 0] == m
        memories[int(m)].update_priorities(positions[mine, 1], td_errors[mine])


def as_frames(observations: np.ndarray, frame_shape: tuple[int, ...]) -> np.ndarray:
    """A vector step's observations in the stored frame layout (a view: the channel axis dropped)."""
    return observations.reshape(len(observations), *frame_shape)


class FrameStacker:
    """The acting side's current stacked states, one per stream, built like the replay's."""

    def __init__(self, num_streams: int, frame_shape: tuple[int, ...], dtype: np.dtype, frame_stack: int):
        self.frame_shape = tuple(frame_shape)
        self.frames = np.zeros((num_streams, frame_stack, *frame_shape), dtype=dtype)

    @classmethod
    def for_space(cls, num_streams: int, space: Any, frame_stack: int) -> FrameStacker:
        """A stacker for frames of a Gymnasium observation space (a Box: shape and dtype known)."""
        shape, dtype = frame_layout(space)
        return cls(num_streams, shape, dtype, frame_stack)

    def reset(self, frames: np.ndarray) -> np.ndarray:
        frames = as_frames(frames, self.frame_shape)
        self.frames[:] = frames[:, None]
        return self.states()

    def push(self, frames: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Append new frames; where `starts`, the stack restarts from that frame."""
        frames = as_frames(frames, self.frame_shape)
        self.frames[:, :-1] = self.frames[:, 1:]
        self.frames[:, -1] = frames
        self.frames[starts] = frames[starts, None]
        return self.states()

    def states(self) -> np.ndarray:
        if len(self.frame_shape) >= 2:
            return self.frames.copy()
        return self.frames.reshape(self.frames.shape[0], -1).copy()
