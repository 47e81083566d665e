"""The actor-learner learner's bookkeeping without Redis or threads: owed updates, trained steps, publication
and snapshot marks, evaluation marks, sync rounds, lost messages and its snapshot state."""

import numpy as np
import torch

from ddq.core.central_learner import CentralLearner, CentralSettings
from ddq.core.dqn import UpdateSchedule
from ddq.core.learner import Learner
from ddq.core.optimizers import OptimizerConfig
from ddq.core.replay import ReplayMemory
from ddq.models import build_q_network
from ddq.transport.experience import Experience

STREAMS, ROWS = 2, 8


def rows(actor: int, sequence: int, sender: int = 0, version: int = 0) -> Experience:
    rng = np.random.default_rng([actor, sequence])
    continues = np.ones((ROWS, STREAMS), bool)
    continues[0] = sequence > 0
    return Experience(actor, sender, sequence, rng.standard_normal((ROWS, STREAMS, 4)).astype(np.float32),
                rng.integers(0, 2, (ROWS, STREAMS)), np.ones((ROWS, STREAMS), np.float32),
                np.zeros((ROWS, STREAMS), bool), continues, weights_version=version)


def make(actors: int = 2, replay_ratio: float = 0.5, learning_starts: int = 16, sync: bool = False,
         trained_before: int = 0) -> CentralLearner:
    torch.manual_seed(0)
    learner = Learner(build_q_network("mlp", (4,), 2, [8]), OptimizerConfig(optimizer="adam", lr=1e-3), 0.99,
                      target_update=4)
    memories = [ReplayMemory(1000, STREAMS, (4,), np.dtype(np.float32), 1, seed=k) for k in range(actors)]
    settings = CentralSettings(batch_size=4, replay_ratio=replay_ratio, publish_every=3, snapshot_every=5,
                               eval_every=40, target_update=4, priority_beta=0.4, total_steps=1000, sync=sync)
    return CentralLearner(learner, memories, UpdateSchedule(replay_ratio, 1, learning_starts), settings,
                          trained_before)


def test_updates_are_owed_at_the_replay_ratio_and_trained_steps_trail_them():
    core = make()
    core.ingest(rows(0, 0))  # 14 env steps (the first row starts episodes): short of learning_starts
    assert (core.ingested, core.owed, core.trained_steps) == (14, 0, 14)
    core.ingest(rows(1, 0))  # 14 more: 28 in all, past 16, so these 14 earn 7 updates
    assert (core.ingested, core.owed) == (28, 7)
    assert core.trained_steps == 28 - 14  # 7 owed updates are 14 env steps at ratio 0.5
    marks = [core.train_once() for _ in range(7)]
    assert core.owed == 0 and core.trained_steps == 28 and core.learner.updates == 7
    assert [m.publish for m in marks] == [False, False, True, False, False, True, False]  # every 3rd update
    assert [m.target_refreshed for m in marks] == [False, False, False, True, False, False, False]
    assert [m.snapshot for m in marks] == [False, False, False, False, True, False, False]
    assert core.target_version == 4


def test_a_restarted_learner_counts_on_from_the_steps_trained_before():
    core = make(trained_before=1000)
    assert core.trained_steps == 1000 and core.next_eval_mark == 1040
    core.ingest(rows(0, 0))
    assert core.trained_steps == 1014


def test_a_message_that_does_not_follow_its_actors_last_one_starts_its_streams_anew():
    core = make(learning_starts=0, replay_ratio=1.0)
    core.ingest(rows(0, 1))  # sequence 1 with no 0 before it: its first row has no predecessor here
    assert core.ingested == 14
    core.ingest(rows(0, 2))  # follows sequence 1: every row continues
    assert core.ingested == 14 + 16
    core.ingest(rows(0, 3, sender=1))  # a restarted actor (a new sender): cut again
    assert core.ingested == 14 + 16 + 14


def test_a_message_taken_before_is_dropped_not_trained_on_twice():
    core = make(learning_starts=0, replay_ratio=1.0)
    assert core.ingest(rows(0, 0)) and core.ingest(rows(0, 1))
    owed = core.owed
    assert not core.ingest(rows(0, 1)) and not core.ingest(rows(0, 0))  # sent again, or restored from Redis
    assert (core.ingested, core.owed, core.senders.repeats) == (14 + 16, owed, 2)
    assert core.ingest(rows(0, 2)) and core.ingested == 14 + 16 + 16  # and the next one still follows
    assert core.ingest(rows(0, 0, sender=1))  # a new sender numbers its messages afresh


def test_evaluation_marks_follow_the_trained_steps_once_each():
    core = make(replay_ratio=1.0, learning_starts=0)
    for sequence in range(3):
        core.ingest(rows(0, sequence))  # 14 + 16 + 16 = 46 env steps, 46 updates owed
    assert core.evaluation_due() is None  # nothing trained yet
    while core.owed:
        core.train_once()
    assert core.evaluation_due() == 46 and core.next_eval_mark == 80
    assert core.evaluation_due() is None


def test_lags_say_how_old_the_weights_were_that_acted():
    core = make(replay_ratio=1.0, learning_starts=0)
    core.ingest(rows(0, 0))
    for _ in range(5):
        core.train_once()
    core.ingest(rows(0, 1, version=2))
    assert core.take_lags() == [0, 3] and core.take_lags() == []


def test_a_sync_round_finishes_once_every_update_it_earned_is_done_and_nothing_is_queued():
    core = make(replay_ratio=1.0, learning_starts=0, sync=True)
    core.ingest(rows(0, 0))
    assert not core.round_finishable(0, nothing_queued=True)  # 14 updates owed
    while core.owed:
        assert not core.train_once().publish  # inside a round nothing is published
    assert not core.round_finishable(0, nothing_queued=False)  # an actor's message is on its way
    assert core.round_finishable(0, nothing_queued=True)
    core.finish_round(0)
    assert not core.round_finishable(0, nothing_queued=True)  # done already


def test_its_state_restores_weights_target_optimizer_and_versions():
    core = make(replay_ratio=1.0, learning_starts=0)
    core.ingest(rows(0, 0))
    while core.owed:
        core.train_once()
    saved = core.state()
    other = make()
    other.load_state(saved)
    assert other.learner.updates == 14 and other.target_version == 12
    assert torch.equal(other.learner.flat.data, core.learner.flat.data)
    assert torch.equal(other.learner.target_flat.data, core.learner.target_flat.data)
