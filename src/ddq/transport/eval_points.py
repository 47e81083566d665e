"""Evaluation points: the learner's weights at each eval_every mark of the env steps it trained on.

In actor-learner training the actors keep playing while the driver evaluates,
so weights read at the moment an evaluation starts would stand for however
many env steps happened to pass while the last evaluation ran (on a slow
simulator, tens of thousands). Instead the learner keeps a copy of its
weights each time the env steps it has trained on cross a multiple of
eval_every, and the driver evaluates them (`ddq.modes.background_eval`:
one a newer mark replaced while it waited is skipped): each mark is
evaluated as serial training evaluates it, on that mark's episodes, and the
step count a run reports reaching its target at is the mark's.

An entry of the run's evaluation-points stream (a Redis stream, read in
order and deleted once read) holds the weights in the parameter server's
wire format, checked as any weights message, and two decimal integers;
nothing in it is deserialized into objects or evaluated.
"""

from __future__ import annotations

import contextlib
import typing
from dataclasses import dataclass

import numpy as np
import redis

from ddq.transport.values import counter_value
from ddq.transport.wire import decode, weights_expectation

MAX_ENTRIES = 64  # a driver that fell this far behind is evaluating on a simulator slower than its learner


@dataclass(frozen=True)
class EvaluationPoint:
    """Weights (version `version`) as they were when the learner had trained on `trained_steps` env steps,
    by which time the actors had played `env_steps`."""

    version: int
    trained_steps: int
    env_steps: int
    weights: np.ndarray


def publish_point(client: redis.Redis, stream: str, weights_message: bytes, trained_steps: int,
                  acted_key: str | None) -> None:
    """Appends the weights of one mark (a wire-format weights message) with the env steps played so far: the
    actors' count at `acted_key` as it is sent, or (None) those trained on, where the learners play them."""
    env_steps = counter_value(client.get(acted_key)) if acted_key is not None else trained_steps
    client.xadd(stream, {"weights": weights_message, "trained_steps": str(trained_steps),
                         "env_steps": str(max(env_steps, trained_steps))}, maxlen=MAX_ENTRIES, approximate=False)


class PointReader:
    """Reads the stream's new entries in order, checks them, and deletes what it read. A malformed entry is
    skipped; `refused` collects one line about each, for the reader's owner to say."""

    def __init__(self, client: redis.Redis, stream: str, layout: bytes, size: int):
        self.client, self.stream = client, stream
        self.expect = weights_expectation(layout, (0, size))
        self.last_id = "0-0"
        self.refused: list[str] = []

    def read_new(self, block_ms: int | None = None) -> list[EvaluationPoint]:
        """The entries added since the last read; with `block_ms`, waits that long for one when there is none."""
        entries = typing.cast(list, self.client.xread({self.stream: self.last_id}, count=MAX_ENTRIES, block=block_ms)
                              or [])
        points = []
        for _, rows in entries:
            for entry_id, fields in rows:
                self.last_id = entry_id
                try:
                    points.append(self._point(fields))
                except (KeyError, ValueError) as error:  # WireError is a ValueError
                    self.refused.append(f"an evaluation point in {self.stream} is malformed and was skipped "
                                        f"({error})")
            with contextlib.suppress(redis.RedisError):  # what was read is handed back whatever: the stream's
                self.client.xdel(self.stream, *[entry_id for entry_id, _ in rows])  # length is capped anyway
        return points

    def _point(self, fields: dict[bytes, bytes]) -> EvaluationPoint:
        header, values = decode(fields[b"weights"], self.expect)
        return EvaluationPoint(header.version, int(fields[b"trained_steps"]), int(fields[b"env_steps"]), values.copy())
