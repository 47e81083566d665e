"""The actor-learner learner's keys in Redis, as named operations: experience in; its weights (where shard 0's
would be, so to an actor the learner is a parameter server), its report and the env steps it trained on out;
the --sync rounds; its snapshots, and data-parallel worker 0's, which a later start of its stage refuses."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import redis

from ddq.transport import snapshots
from ddq.transport.eval_points import publish_point
from ddq.transport.keys import RunKeys
from ddq.transport.redis_client import Connection
from ddq.transport.values import counter_value


class LearnerChannel:
    """One run's learner keys, through a connection."""

    def __init__(self, client: Connection, run: str):
        self.client, self.keys = client, RunKeys(run)
        self.shard = self.keys.shard(0)

    # ---------------------------------------------------------------- experience in
    def take_experience(self, timeout_s: float) -> bytes | None:
        """The oldest experience message, waiting up to `timeout_s` for one; None when none came."""
        taken = self.client.brpop([self.keys.experience], timeout=timeout_s)
        return typing.cast(bytes, taken[1]) if taken else None

    def take_queued_experience(self, limit: int = 10_000) -> list[bytes]:
        """Up to `limit` queued experience messages, oldest first, without waiting."""
        return typing.cast(list[bytes], self.client.rpop(self.keys.experience, limit) or [])

    def experience_waiting(self) -> bool:
        return bool(self.client.llen(self.keys.experience))

    # ---------------------------------------------------------------- counts and rounds
    def trained_steps(self) -> int:
        """The env steps the learner has trained on, as last written (0 before)."""
        return counter_value(self.client.get(self.keys.trained_steps))

    def start_trained_steps(self, env_steps: int) -> None:
        """Writes the count a resumed run starts from, unless one was written."""
        self.client.set(self.keys.trained_steps, env_steps, nx=True)

    def round_ready(self) -> int:
        """--sync: the last round every actor has sent (-1 before the first)."""
        return counter_value(self.client.get(self.keys.round_ready), missing=-1)

    def round_done(self) -> int:
        """--sync: the last round the learner trained on and published weights for (-1 before the first)."""
        return counter_value(self.client.get(self.keys.round_done), missing=-1)

    def set_round_done(self, number: int) -> None:
        self.client.set(self.keys.round_done, number)

    # ---------------------------------------------------------------- out
    def publish_weights(self, version: int, messages: list[bytes], trained: int | None) -> None:
        """Announces `version` and stores its weights messages (the weights, and the target when there are
        two), with the env steps they were trained on unless `trained` is None, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.publish(self.shard.applied, str(version))
        pipe.set(self.shard.weights, messages[0])
        if len(messages) > 1:
            pipe.set(self.shard.target, messages[1])
        self._execute(pipe, trained)

    def write_report(self, report: dict, trained: int | None) -> None:
        """The learner's babysitting numbers where shard 0's would be, with the env steps trained on unless
        `trained` is None."""
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.shard.metrics, json.dumps(report))
        self._execute(pipe, trained)

    def _execute(self, pipe: typing.Any, trained: int | None) -> None:
        if trained is not None:
            pipe.set(self.keys.trained_steps, trained)
        pipe.execute()

    def publish_evaluation_point(self, weights_message: bytes, trained: int, plays_trained: bool = False) -> None:
        """`plays_trained`: the learner played what it trained on (data-parallel's workers), whose count the
        point keeps; else the point keeps the actors' count in Redis as it is sent, which lags their play."""
        publish_point(self.client, self.keys.eval_points, weights_message, trained,
                      None if plays_trained else self.keys.env_steps)

    # ---------------------------------------------------------------- snapshots
    def save_snapshot(self, state: snapshots.ShardState, path: Path | None, layout: bytes,
                      bounds: tuple[int, int]) -> None:
        snapshots.save(self.client, self.shard.snapshot, path, state, layout, bounds)

    def begin_stage_start(self, start: int) -> None:
        """Data-parallel: `start` of the stage begins, so snapshots of earlier starts are refused from now on:
        where a cluster has task slots to spare, an earlier start's worker 0 can still be writing its last
        one after this start read the snapshot it resumes from."""
        self._unless_a_later_start(start, lambda pipe: pipe.set(self.keys.stage_start, start))

    def save_stage_snapshot(self, state: snapshots.ShardState, layout: bytes, bounds: tuple[int, int],
                            start: int) -> bool:
        """Data-parallel: the snapshot of `start` of the stage, written unless a later start has begun (then
        False: that start resumed from an earlier snapshot, and this one would mix two lineages). The start is
        written again with it: a Redis restarted from its own snapshot, a second or two old, may have lost it."""
        def write(pipe: typing.Any) -> None:
            snapshots.replace(pipe, self.shard.snapshot, state, layout, bounds)
            pipe.set(self.keys.stage_start, start)

        return self._unless_a_later_start(start, write)

    def _unless_a_later_start(self, start: int, write: typing.Callable[[typing.Any], object]) -> bool:
        """`write`'s commands in one transaction, unless the newest start of the stage is later than `start`:
        compared and written in one step (WATCH), as a later start may begin between the two."""
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self.keys.stage_start)
                    if counter_value(pipe.get(self.keys.stage_start)) > start:
                        return False
                    pipe.multi()
                    write(pipe)
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue  # a start began meanwhile: compare again

    def copy_snapshot(self, path: Path, layout: bytes, bounds: tuple[int, int], newer_than: int) -> int | None:
        """The snapshot in Redis written to the file `path` if its version is above `newer_than` (the file's):
        the version written, else None. Not an older one: a Redis restarted from its own snapshot, a second or
        two old, can hold an older one for a while. Redis's copy is left alone (its writer may be writing a
        newer one meanwhile, which a write back would replace). Its version is read first: a checkpoint
        mostly finds none newer, and the snapshot is a few megabytes."""
        version = snapshots.version_in_redis(self.client, self.shard.snapshot)
        if version is None or version <= newer_than:
            return None
        state = snapshots.load_newest(self.client, self.shard.snapshot, None, layout, bounds)
        if state is None or state.version <= newer_than:
            return None
        snapshots.save_file(path, state, layout, bounds)
        return state.version

    def newest_snapshot(self, path: Path | None, layout: bytes, bounds: tuple[int, int]) -> snapshots.ShardState | None:
        return snapshots.load_newest(self.client, self.shard.snapshot, path, layout, bounds)
