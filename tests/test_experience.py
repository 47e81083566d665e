"""Experience on the wire (actor-learner mode): each frame sent once in its own dtype, checked field by field,
and rebuilt on the learner exactly as the actor's own replay memory would hold it."""

import numpy as np
import pytest
import torch

from ddq.config import config_of
from ddq.core.actor import Actor
from ddq.core.replay import ReplayMemory
from ddq.gamesim.envs import make_vector_env
from ddq.models import build_q_network
from ddq.transport.experience import HEADER, ExpectExperience, Experience, ExperienceError, decode, encode
from ddq.workers.actor import Outbox

SHAPE = (4, 5)
EXPECT = ExpectExperience("run-a", SHAPE, np.dtype(np.uint8), num_actions=3, actors=2, streams=2)


def _experience(rows=3, streams=2, td=True) -> Experience:
    rng = np.random.default_rng(0)
    return Experience(actor=1, sender=2, sequence=7,
                      frames=rng.integers(0, 255, (rows, streams, *SHAPE), dtype=np.uint8),
                      actions=rng.integers(0, 3, (rows, streams)), rewards=rng.random((rows, streams)),
                      terminated=rng.random((rows, streams)) < 0.3, continues=rng.random((rows, streams)) < 0.8,
                      td_errors=rng.random((rows, streams)).astype(np.float32) if td else None,
                      weights_version=42, epsilon=0.25)


def test_a_message_round_trips_with_each_frame_once_in_its_own_dtype():
    sent = _experience()
    message = encode("run-a", sent)
    steps = 3 * 2
    assert len(message) == HEADER.size + steps * (20 + 4 + 4 + 1 + 1 + 4)  # uint8 frames, no s' copy
    got = decode(message, EXPECT)
    assert got.frames.dtype == np.uint8
    for name in ("frames", "actions", "rewards", "terminated", "continues", "td_errors"):
        np.testing.assert_array_equal(getattr(got, name), getattr(sent, name).astype(getattr(got, name).dtype))
    assert (got.actor, got.sender, got.sequence, got.weights_version) == (1, 2, 7, 42)
    assert got.epsilon == pytest.approx(0.25) and got.env_steps == int(sent.continues.sum())
    assert decode(encode("run-a", _experience(td=False)), EXPECT).td_errors is None


@pytest.mark.parametrize("spoil, reason", [
    (lambda m: encode("run-b", _experience()), "run"),
    (lambda m: m[:30], "truncated"),
    (lambda m: m + b"\0", "size"),
    (lambda m: b"XXXX" + m[4:], "bad_header"),
    (lambda m: encode("run-a", Experience(**{**_experience().__dict__, "actions": np.full((3, 2), 3)})), "action"),
    (lambda m: encode("run-a", Experience(**{**_experience().__dict__, "rewards": np.full((3, 2), np.nan)})),
     "non_finite"),
    (lambda m: encode("run-a", Experience(**{**_experience().__dict__,
                                            "frames": np.zeros((3, 2, 5, 4), np.uint8)})), "shape"),
    (lambda m: encode("run-a", Experience(**{**_experience().__dict__,
                                            "frames": np.zeros((3, 2, *SHAPE), np.float32)})), "dtype"),
    # what the learner's replay memory of the actor could not take (an IndexError or a broadcast had ended it)
    (lambda m: encode("run-a", _experience(rows=0)), "rows"),
    (lambda m: encode("run-a", _experience(streams=3)), "rows"),
    (lambda m: encode("run-a", Experience(**{**_experience().__dict__, "actor": 2})), "rows"),
])
def test_a_message_that_is_not_this_runs_experience_is_refused(spoil, reason):
    with pytest.raises(ExperienceError) as error:
        decode(spoil(encode("run-a", _experience())), EXPECT)
    assert error.value.reason == reason


class Tee:
    """Records an actor's steps both in its own replay memory and in an outbox."""

    def __init__(self, *sinks):
        self.sinks = sinks

    def start(self, frames):
        for sink in self.sinks:
            sink.start(frames)

    def add(self, *args):
        for sink in self.sinks:
            sink.add(*args)


@pytest.mark.parametrize("n_step", [1, 3])
def test_the_learner_rebuilds_the_actors_replay_memory_from_its_messages(n_step):
    config = config_of(env="CartPole-v1", num_envs=3)
    own = ReplayMemory(500, 3, (4,), np.dtype(np.float32), 2, seed=0)
    rebuilt = ReplayMemory(500, 3, (4,), np.dtype(np.float32), 2, seed=0, n_step=n_step, gamma=0.99)
    outbox = Outbox(gamma=0.99, n_step=n_step)
    sent_td = []
    actor = Actor(make_vector_env(config.agent.env, 3, config.agent.env_options), Tee(own, outbox), 2,
                  np.random.default_rng(0), "cpu")
    net = build_q_network("mlp", (8,), 2, [16])
    actor.reset(seed=0)
    expect = ExpectExperience("r", (4,), np.dtype(np.float32), 2, actors=1, streams=3)
    for step in range(1, 101):
        actor.step(net, 0.5)
        outbox.settle(actor.q_values)
        if step % 16 == 0:
            (frames, actions, rewards, terminated, continues), td = outbox.take()
            got = decode(encode("r", Experience(0, 0, step, frames, actions, rewards, terminated, continues, td)),
                         expect)
            assert (got.td_errors[~got.continues] == -1).all() and (got.td_errors[got.continues] >= 0).all()
            sent_td += list(got.td_errors)
            for row in range(len(got.frames)):
                rebuilt.add(got.frames[row], got.actions[row], got.rewards[row], got.terminated[row],
                            got.continues[row])
    (frames, actions, rewards, terminated, continues), td = outbox.take(everything=True)
    for row in range(len(frames)):
        rebuilt.add(frames[row], actions[row], rewards[row], terminated[row], continues[row])
    assert rebuilt.written == own.written == 101
    for name in ReplayMemory._ARRAYS:
        np.testing.assert_array_equal(getattr(rebuilt, name), getattr(own, name), err_msg=name)
    # Each settled priority is the TD error the learner computes for that transition with the same weights:
    # row j's transition leaves frame j - 1, over the same n steps.
    rows, streams = np.nonzero(np.array(sent_td) >= 0)
    assert len(rows) > 200
    batch = rebuilt.gather(rows - 1, streams)
    with torch.no_grad():
        chosen = net(torch.from_numpy(batch.states)).numpy()[np.arange(len(rows)), batch.actions]
        ahead = net(torch.from_numpy(batch.next_states)).numpy().max(axis=1)
    discounts = 0.99 if n_step == 1 else batch.discounts
    expected = np.abs(batch.rewards + np.where(batch.terminated, 0, discounts * ahead) - chosen)
    np.testing.assert_allclose(np.array(sent_td)[rows, streams], expected, rtol=1e-5, atol=1e-5)


def test_n_step_initial_priorities_by_hand():
    """One stream, two actions, gamma 0.5, n 2: a termination, a reset and a time limit inside the windows."""
    outbox = Outbox(gamma=0.5, n_step=2)
    frame = np.zeros((1, 1), np.float32)
    outbox.start(frame)
    steps = [  # (action, reward, terminated, continues, Q of the state acted on)
        (1, 1.0, False, True, [1, 2]),  # from s0 (Q [1, 2]) to s1
        (0, 2.0, False, True, [0, 4]),  # s1 -> s2
        (1, 4.0, True, True, [3, 1]),  # s2 -> s3, terminated
        (0, 0.0, False, False, [7, 7]),  # reset: s4, not a transition
        (1, 1.0, False, True, [1, 1]),  # s4 -> s5
        (0, 3.0, False, True, [2, 5]),  # s5 -> s6, then cut by a time limit
        (0, 0.0, False, False, [6, 0]),  # reset: s7
        (0, 0.0, False, True, [0, 0]),  # s7 -> s8
        (0, 0.0, False, True, [0, 0]),  # s8 -> s9
    ]
    for action, reward, terminated, continues, q in steps:
        outbox.add(frame, np.array([action]), np.array([reward]), np.array([terminated]), np.array([continues]))
        outbox.settle(np.array([q], np.float32))
    _, td = outbox.take()
    expected = [-1.0,  # the first frame
                abs(1 + 0.5 * 2 + 0.25 * 3 - 2),  # r1 + g r2 + g^2 max Q(s2) - Q(s0, 1) = 0.75
                abs(2 + 0.5 * 4 - 0),  # r2 + g r3, terminated: 4
                abs(4 - 1),  # r3 alone, terminated: 3
                -1.0,  # the reset
                abs(1 + 0.5 * 3 + 0.25 * 6 - 1),  # r5 + g r6 + g^2 max Q(s6) - Q(s4, 1) = 3
                abs(3 + 0.5 * 6 - 2),  # r6, then the time limit: bootstraps from s6 after one step = 4
                -1.0]  # the reset
    np.testing.assert_allclose(td[:, 0], expected, rtol=1e-6)
    assert len(outbox) == 2  # s8 and s9 wait for Q-values two steps ahead
