"""Replay memory: frames stored once, stacks built within episodes, resets never stored as transitions."""

import numpy as np
import pytest
import torch

from ddq.core.replay import Batch, FrameStacker, ReplayMemory, state_shape


def frames_of(values):
    """One 2x2 image frame per stream, filled with its value."""
    return np.array(values, dtype=np.uint8)[:, None, None] * np.ones((1, 2, 2), dtype=np.uint8)


def run_episode_stream(memory, episode_ends, steps):
    """A single stream whose frame t has value t; episodes end (terminate) at the listed t."""
    memory.start(frames_of([0]))
    resetting = False
    for t in range(1, steps):
        continues = np.array([not resetting])
        terminated = np.array([t in episode_ends])
        memory.add(frames_of([t]), np.array([t % 3]), np.array([float(t)]), terminated, continues)
        resetting = bool(continues[0] and terminated[0])


def test_state_shapes():
    assert state_shape((84, 84), 4) == (4, 84, 84)
    assert state_shape((12, 12), 1) == (1, 12, 12)
    assert state_shape((4,), 1) == (4,)
    assert state_shape((4,), 3) == (12,)


def test_sampled_transitions_are_consistent_and_never_cross_a_reset():
    memory = ReplayMemory(100, 1, (2, 2), np.uint8, frame_stack=3, seed=0)
    # Episode A: frames 0..4 (frame 4 terminal), frame 5 is the reset frame of episode B.
    run_episode_stream(memory, episode_ends={4}, steps=12)
    batch = memory.sample(2000)
    first = batch.states[:, -1, 0, 0].astype(int)
    nxt = batch.next_states[:, -1, 0, 0].astype(int)
    assert 4 not in set(first)  # the terminal frame has no transition out of it
    assert np.all(nxt == first + 1)  # the next state is the frame that followed
    assert np.all(batch.rewards == nxt)  # the reward was recorded with the step that produced frame t
    assert np.all(batch.actions == nxt % 3)
    assert np.all(batch.terminated == (nxt == 4))
    assert set(first) == {0, 1, 2, 3, 5, 6, 7, 8, 9, 10}


def test_stacks_repeat_the_first_frame_instead_of_reaching_into_the_previous_episode():
    memory = ReplayMemory(100, 1, (2, 2), np.uint8, frame_stack=3, seed=0)
    run_episode_stream(memory, episode_ends={4}, steps=12)
    batch = memory.sample(2000)
    stacks = {tuple(s[:, 0, 0]) for s in batch.states.astype(int)}
    assert (0, 0, 0) in stacks and (0, 0, 1) in stacks and (0, 1, 2) in stacks
    assert (5, 5, 5) in stacks and (5, 5, 6) in stacks and (5, 6, 7) in stacks
    assert not any(3 in s and 5 in s or 4 in s and 5 in s for s in stacks)


def test_acting_side_stacks_like_the_replay():
    stacker = FrameStacker(1, (2, 2), np.uint8, 3)
    assert stacker.reset(frames_of([5]))[0, :, 0, 0].tolist() == [5, 5, 5]
    assert stacker.push(frames_of([6]), np.array([False]))[0, :, 0, 0].tolist() == [5, 5, 6]
    assert stacker.push(frames_of([9]), np.array([True]))[0, :, 0, 0].tolist() == [9, 9, 9]


def test_vector_observations_concatenate_when_stacked():
    memory = ReplayMemory(50, 2, (3,), np.float32, frame_stack=2, seed=1)
    memory.start(np.zeros((2, 3), np.float32))
    for t in range(1, 6):
        memory.add(np.full((2, 3), t, np.float32), np.zeros(2, int), np.zeros(2), np.zeros(2, bool),
                   np.ones(2, bool))
    batch = memory.sample(64)
    assert batch.states.shape == (64, 6)
    assert np.all(batch.states[:, 3:] - batch.states[:, :3] <= 1)


def test_circular_buffer_only_samples_frames_still_stored():
    memory = ReplayMemory(10, 1, (2, 2), np.uint8, frame_stack=2, seed=0)
    run_episode_stream(memory, episode_ends=set(), steps=200)
    batch = memory.sample(1000)
    kept = batch.states[:, 0, 0, 0].astype(int)
    # 10 slots hold frames 190..199; the oldest full stack is (190, 191).
    assert memory.slots == 10
    assert kept.min() == 190 and batch.next_states[:, -1, 0, 0].max() == 199
    assert len(memory) == memory.slots - 1


def test_streams_are_independent():
    memory = ReplayMemory(100, 2, (2, 2), np.uint8, frame_stack=1, seed=0)
    memory.start(frames_of([0, 100]))
    for t in range(1, 10):
        memory.add(frames_of([t, 100 + t]), np.zeros(2, int), np.zeros(2), np.zeros(2, bool), np.ones(2, bool))
    batch = memory.sample(500)
    first, nxt = batch.states[:, 0, 0, 0].astype(int), batch.next_states[:, 0, 0, 0].astype(int)
    assert np.all(nxt == first + 1)
    assert (first >= 100).any() and (first < 100).any()


def test_empty_memory_refuses_to_sample():
    memory = ReplayMemory(10, 1, (2,), np.float32)
    with pytest.raises(ValueError, match="no transitions"):
        memory.sample(4)


def test_save_and_load_round_trip(tmp_path):
    memory = ReplayMemory(100, 1, (2, 2), np.uint8, frame_stack=3, seed=0)
    run_episode_stream(memory, episode_ends={4}, steps=12)
    memory.save(str(tmp_path / "replay.npz"))
    restored = ReplayMemory(100, 1, (2, 2), np.uint8, frame_stack=3, seed=0)
    restored.load(str(tmp_path / "replay.npz"))
    assert restored.written == memory.written and len(restored) == len(memory)
    np.testing.assert_array_equal(restored.sample(50).states, memory.sample(50).states)


def test_n_step_transitions_sum_discounted_rewards_within_their_episode():
    memory = ReplayMemory(100, 1, (2, 2), np.uint8, frame_stack=1, seed=0, n_step=3, gamma=0.5)
    # Frame t has value t and the step into it earned reward t; frame 4 is terminal, 5 starts anew.
    run_episode_stream(memory, episode_ends={4}, steps=12)
    batch = memory.sample(3000)
    first, nxt = batch.states[:, 0, 0, 0].astype(int), batch.next_states[:, 0, 0, 0].astype(int)
    expected = {  # first frame: (n-step return, next frame, discount gamma^m, terminated)
        0: (1 + 0.5 * 2 + 0.25 * 3, 3, 0.125, False),
        2: (3 + 0.5 * 4, 4, 0.25, True),  # the window stops at the termination
        3: (4, 4, 0.5, True),
        5: (6 + 0.5 * 7 + 0.25 * 8, 8, 0.125, False),
        9: (10 + 0.5 * 11, 11, 0.25, False),  # frame 11 is the newest: nothing beyond it yet
        10: (11, 11, 0.5, False),
    }
    assert set(first) == {0, 1, 2, 3, 5, 6, 7, 8, 9, 10}
    for frame, (ret, next_frame, discount, terminated) in expected.items():
        rows = first == frame
        assert np.allclose(batch.rewards[rows], ret) and np.all(nxt[rows] == next_frame)
        assert np.allclose(batch.discounts[rows], discount) and np.all(batch.terminated[rows] == terminated)


def test_the_learner_bootstraps_with_each_transitions_discount():
    from torch import nn

    from ddq.core.learner import Learner
    from ddq.core.optimizers import OptimizerConfig
    from ddq.core.replay_training import replay_gradient

    def gradient(**batch_fields):
        torch.manual_seed(0)
        learner = Learner(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)), OptimizerConfig(), 0.9, 10)
        replay_gradient(learner, Batch(**batch_fields))
        return learner.flat.grad.clone()

    states = np.arange(16, dtype=np.float32).reshape(4, 2, 2) / 16
    common = dict(states=states, actions=np.array([0, 1, 0, 1]), rewards=np.ones(4, np.float32),
                  next_states=states[::-1].copy())
    # A discount of 0 cuts the bootstrap as a termination does; a discount of 0.9 is the learner's gamma.
    assert torch.allclose(gradient(**common, terminated=np.zeros(4, bool), discounts=np.zeros(4, np.float32)),
                          gradient(**common, terminated=np.ones(4, bool)))
    assert torch.allclose(gradient(**common, terminated=np.zeros(4, bool), discounts=np.full(4, 0.9, np.float32)),
                          gradient(**common, terminated=np.zeros(4, bool)))



SAVE_UNDER_A_SIZE_LIMIT = """
import resource, signal, sys
import numpy as np
from ddq.core.replay import ReplayMemory
memory = ReplayMemory(32_000, 1, (2, 2), np.uint8, 1, seed=0)
memory.load(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))  # a disk that fills mid-write
try:
    memory.save(sys.argv[1])
except OSError as error:
    print("failed:", error)
"""


def test_a_save_that_fails_mid_write_leaves_the_previous_replay_file_whole(tmp_path):
    """The replay memory is written whole or not at all: a save that stops part-way (a full disk, a kill)
    leaves the file of the save before it loadable. Written in place, it was a truncated zip that --resume
    could not read."""
    import os
    import subprocess
    import sys

    memory = ReplayMemory(32_000, 1, (2, 2), np.uint8, 1, seed=0)  # about 0.6 MB of arrays a save
    run_episode_stream(memory, {50, 120}, 200)
    path = tmp_path / "replay.npz"
    memory.save(str(path))
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # readable as any file the run writes
    done = subprocess.run([sys.executable, "-c", SAVE_UNDER_A_SIZE_LIMIT, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert f"failed: cannot write {path}: File too large" in done.stdout, (done.stdout, done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay.npz"]  # no temporary file left behind
    restored = ReplayMemory(32_000, 1, (2, 2), np.uint8, 1, seed=0)
    restored.load(str(path))
    assert restored.written == memory.written  # the first save's memory, whole
