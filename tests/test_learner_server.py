"""The learner process's loop on a real Redis, step by step: how far it lets actors run ahead, and the env
steps trained on that it publishes with its weights (the count actor-learner's epsilon follows)."""

import numpy as np
import pytest
import redis

from ddq.config import config_of
from ddq.learner_server.server import INBOX_MESSAGES, LearnerServer
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
    config = config_of(env="CartPole-v1", workers=1, num_envs=STREAMS, learning_starts=64, replay_ratio=1.0,
                         batch_size=16, publish_every=10, hidden=[16])
    server = LearnerServer(config, server_url, RUN)
    client, keys = redis.Redis.from_url(server_url), RunKeys(RUN)
    for sequence in range(5):
        client.lpush(keys.experience, message(sequence))

    # The inbox holds one decoded message; the rest stay in Redis, where they hold the actors back.
    assert server.receive_once(client) and server.inbox.qsize() == INBOX_MESSAGES == 1
    assert client.llen(keys.experience) == 4
    assert not server.receive_once(client) and client.llen(keys.experience) == 4
    server.step()  # takes message 0: 60 env steps (its first row starts episodes), short of learning_starts
    assert server.core.owed == 0 and server.core.trained_steps == 60
    assert server.receive_once(client) and client.llen(keys.experience) == 3
    server.step()  # takes message 1: past learning_starts, its 64 env steps earn 64 updates, none done yet
    assert server.core.owed == 64 and server.core.trained_steps == 60

    published = []
    publisher = server.publisher  # its thread is not started: the test sends each hand-over itself
    while server.core.owed > 0:
        server.step()  # trains up to 16 updates; every 10th hands its weights to the publisher
        if publisher.outbox is not None:
            (version, messages, trained), publisher.outbox = publisher.outbox, None
            publisher.send(client, version, messages, trained)
            # published with the env steps those weights were trained on (60 + one per update), without
            # waiting for housekeeping (every quarter second, which this test never runs)
            published.append((version, int(client.get(keys.trained_steps))))
    assert published and all(count == 60 + version for version, count in published)
    assert published[-1][0] == 60 and server.core.learner.updates == 64 and server.core.trained_steps == 124

    # The count never goes back: a hand-over counted before a later write does not undo it.
    publisher.send(client, 64, server.weights(target_too=False), 100)
    assert int(client.get(keys.trained_steps)) == published[-1][1] == 120  # the last publication's, not 100

