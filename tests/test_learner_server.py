"""The learner process's loop on a real Redis, step by step: how far it lets actors run ahead, and the env
steps trained on that it publishes with its weights (the count actor-learner's epsilon follows)."""

import numpy as np
import pytest
import redis

from ddq.config import TrainConfig
from ddq.learner_process.server import INBOX_MESSAGES, LearnerServer
from ddq.transport.experience import Experience, encode
from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis

RUN = "learner-test"
ROWS, STREAMS = 16, 4  # a CartPole actor's message: 16 vector steps of 4 envs


@pytest.fixture
def server_url():
    with EmbeddedRedis() as server:
        yield server.url


def message(sequence: int) -> bytes:
    rng = np.random.default_rng(sequence)
    continues = np.ones((ROWS, STREAMS), bool)
    continues[0] = sequence > 0  # the first message starts its episodes
    return encode(RUN, Experience(0, 0, sequence, rng.standard_normal((ROWS, STREAMS, 4)).astype(np.float32),
                                  rng.integers(0, 2, (ROWS, STREAMS)), np.ones((ROWS, STREAMS), np.float32),
                                  np.zeros((ROWS, STREAMS), bool), continues))


def test_the_learner_takes_one_message_ahead_and_publishes_trained_steps_with_its_weights(server_url):
    config = TrainConfig(env="CartPole-v1", workers=1, num_envs=STREAMS, learning_starts=64, replay_ratio=1.0,
                         batch_size=16, publish_every=10, hidden=[16])
    learner = LearnerServer(config, server_url, RUN)
    client, keys = redis.Redis.from_url(server_url), RunKeys(RUN)
    for sequence in range(5):
        client.lpush(keys.experience, message(sequence))

    # The inbox holds one decoded message; the rest stay in Redis, where they hold the actors back.
    assert INBOX_MESSAGES == 1
    assert learner.receive_once(client) and learner.inbox.qsize() == 1 and client.llen(keys.experience) == 4
    assert not learner.receive_once(client) and client.llen(keys.experience) == 4
    learner.step()  # takes message 0 (60 env steps: its first row starts episodes), owes nothing yet
    assert learner.owed == 0 and learner.trained_steps == 60
    assert learner.receive_once(client) and client.llen(keys.experience) == 3
    learner.step()  # takes message 1: 64 env steps past learning_starts earn 60 updates (the first 4 did not)
    assert learner.owed > 0 and learner.trained_steps < 124

    published = []
    while learner.owed > 0:
        trained_before = learner.trained_steps
        learner.step()  # trains up to 16 updates; every 10th hands its weights to the publisher
        if learner.outbox is not None:
            version, messages, trained = learner.outbox
            learner.outbox = None
            learner._send_weights(client, version, messages, trained)
            # published with the env steps trained on when they were handed over, without waiting for
            # housekeeping (every quarter second, which this test never runs)
            assert int(client.get(keys.trained_steps)) == trained_before
            published.append(version)
    assert len(published) >= 3 and published == sorted(published) and published[-1] == 60
    assert learner.trained_steps == 124
